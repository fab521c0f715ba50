#include "loom/export/megatron_rules.h"

#include <fmt/format.h>

#include <algorithm>
#include <regex>
#include <set>

#include "loom/error.h"

namespace loom {

namespace {

constexpr const char* kArgs = "megatron/training/arguments.py validate_args";
constexpr const char* kConfig = "megatron/core/transformer/transformer_config.py TransformerConfig.__post_init__";
constexpr const char* kLayout = "megatron/core/transformer/pipeline_parallel_layer_layout.py validate_layer_layout";
constexpr const char* kMimo = "examples/mimo/training/args.py validate_hetero_grid_args";

int64_t Int(const MegatronLaunch& l, const std::string& flag, int64_t fallback) {
  const std::string v = l.Value(flag);
  if (v.empty()) return fallback;
  try {
    return std::stoll(v);
  } catch (const std::exception&) {
    return fallback;
  }
}

// validate_args' checks of one rank grid: the GPT rules (pretrain_gpt.py,
// pretrain_vlm.py, and the MIMO LLM grid, which pretrain_mimo.py validates
// with the world set to the LLM's ranks).
void GridRules(const MegatronLaunch& l, int world, std::vector<std::string>& errors) {
  const int64_t tp = Int(l, "--tensor-model-parallel-size", 1), pp = Int(l, "--pipeline-model-parallel-size", 1);
  const int64_t cp = Int(l, "--context-parallel-size", 1);
  if (world % (tp * pp * cp) != 0) {
    errors.push_back(fmt::format("{}: world size ({}) is not divisible by total_model_size (total_model_size={})",
                                 kArgs, world, tp * pp * cp));
    return;
  }
  const int64_t dp = world / (tp * pp * cp);
  const int64_t mbs = Int(l, "--micro-batch-size", 0), gbs = Int(l, "--global-batch-size", mbs * dp);
  if (mbs <= 0) errors.push_back(fmt::format("{}: --micro-batch-size is required and positive", kArgs));
  if (mbs > 0 && gbs % (mbs * dp) != 0) {
    errors.push_back(fmt::format(
        "megatron/core/num_microbatches_calculator.py ConstantNumMicroBatchesCalculator: global batch size ({}) is "
        "not divisible by micro batch size ({}) times data parallel size ({})",
        gbs, mbs, dp));
  }
  const int64_t layers = Int(l, "--num-layers", 0);
  for (const char* required :
       {"--num-layers", "--hidden-size", "--num-attention-heads", "--max-position-embeddings", "--seq-length"}) {
    if (!l.Has(required)) errors.push_back(fmt::format("{}: {} argument is None", kArgs, required + 2));
  }
  const int64_t hidden = Int(l, "--hidden-size", 0), heads = Int(l, "--num-attention-heads", 0);
  if (!l.Has("--kv-channels") && heads > 0 && hidden % heads != 0) {
    errors.push_back(
        fmt::format("{}: hidden_size ({}) % num_attention_heads ({}) == 0 (give --kv-channels)", kArgs, hidden, heads));
  }
  if (heads > 0 && heads % tp != 0) {
    errors.push_back(fmt::format("{}: num_attention_heads ({}) must be a multiple of tensor_model_parallel_size ({}).",
                                 kConfig, heads, tp));
  }
  if (l.Has("--group-query-attention")) {
    const int64_t groups = Int(l, "--num-query-groups", 1);
    if (groups % tp != 0 && tp % groups != 0) {
      errors.push_back(
          fmt::format("{}: num_query_groups ({}) must be a multiple or divisor of tensor_model_parallel_size ({}).",
                      kConfig, groups, tp));
    }
  }
  if (cp > 1 && Int(l, "--seq-length", 0) % (2 * cp) != 0) {
    errors.push_back(fmt::format(
        "{}: seq-length should be a multiple of 2 * context-parallel-size if context-parallel-size > 1.", kArgs));
  }
  if (l.Has("--fp16") && l.Has("--bf16")) errors.push_back(fmt::format("{}: --fp16 and --bf16 together", kArgs));
  // Pipeline layers: a layout, or layers divisible by PP.
  int64_t vpp = 1;
  if (l.Has("--pipeline-model-parallel-layout")) {
    std::vector<std::string> stages;
    try {
      stages = ParseMegatronLayout(l.Value("--pipeline-model-parallel-layout"));
    } catch (const Error& e) {
      errors.push_back(e.what());
      return;
    }
    if (static_cast<int64_t>(stages.size()) % pp != 0) {
      errors.push_back(fmt::format(
          "{}: The length of pipeline_model_parallel_layout must be divisible by pipeline_model_parallel_size "
          "(num_stages={}, args.pipeline_model_parallel_size={})",
          kArgs, stages.size(), pp));
      return;
    }
    vpp = static_cast<int64_t>(stages.size()) / pp;
    std::string flat;
    for (const auto& s : stages) flat += s;
    if (flat.empty() || flat.front() != 'E')
      errors.push_back(fmt::format("{}: The first layer must be embedding", kLayout));
    if (flat.empty() || flat.back() != 'L') errors.push_back(fmt::format("{}: The last layer must be loss", kLayout));
    if (std::count(flat.begin(), flat.end(), 'E') != 1) {
      errors.push_back(fmt::format("{}: Embedding must be specified exactly once", kLayout));
    }
    if (std::count(flat.begin(), flat.end(), 'L') != 1) {
      errors.push_back(fmt::format("{}: Loss must be specified exactly once", kLayout));
    }
    const int64_t t = std::count(flat.begin(), flat.end(), 't');
    if (t != layers) {
      errors.push_back(fmt::format("{}: Number of decoder layers {} must match num_layers {}", kLayout, t, layers));
    }
  } else if (pp > 1 && layers % pp != 0) {
    errors.push_back(
        fmt::format("{}: Number of layers should be divisible by the pipeline-model-parallel size", kArgs));
  }
  if (vpp > 1) {
    if (pp <= 1) {
      errors.push_back(fmt::format(
          "{}: When interleaved schedule is used, pipeline-model-parallel size should be greater than 1", kArgs));
    }
    // The interleaved schedule (schedules.py forward_backward_pipelining_with_interleaving), with
    // --microbatch-group-size-per-virtual-pipeline-stage at its default, PP.
    const int64_t m = mbs > 0 ? gbs / (mbs * dp) : 0;
    if (m < pp || m % pp != 0) {
      errors.push_back(
          fmt::format("megatron/core/pipeline_parallel/schedules.py forward_backward_pipelining_with_interleaving: {} "
                      "microbatches with pipeline-parallel size {}: the interleaved schedule needs a multiple of it",
                      m, pp));
    }
  }
  // Recomputation (transformer_config.py) and the overlap flags.
  const std::string granularity = l.Value("--recompute-granularity");
  if (granularity == "full" && (!l.Has("--recompute-method") || !l.Has("--recompute-num-layers"))) {
    errors.push_back(
        fmt::format("{}: Using recompute_granularity: full so recompute_method must be \"block\" or \"uniform\" and "
                    "recompute_num_layers given",
                    kConfig));
  }
  if (granularity == "selective" && l.Has("--recompute-method")) {
    errors.push_back(
        fmt::format("{}: recompute method is not yet supported for selective recomputing granularity", kArgs));
  }
  if (l.Has("--overlap-param-gather") && (!l.Has("--use-distributed-optimizer") || !l.Has("--overlap-grad-reduce"))) {
    errors.push_back(fmt::format(
        "{}: --overlap-param-gather only supported with distributed optimizer and --overlap-grad-reduce", kArgs));
  }
  // CUDA_DEVICE_MAX_CONNECTIONS on GPUs before Blackwell.
  if ((tp > 1 || cp > 1) && !l.blackwell) {
    const auto it = std::find_if(l.env.begin(), l.env.end(),
                                 [](const auto& e) { return e.first == "CUDA_DEVICE_MAX_CONNECTIONS"; });
    if (it == l.env.end() || it->second != "1") {
      errors.push_back(fmt::format(
          "{}: Using tensor model parallelism or context parallelism require setting the environment variable "
          "CUDA_DEVICE_MAX_CONNECTIONS to 1",
          kArgs));
    }
  }
}

// What a run needs beyond validate_args (training.py, the tokenizer, the data).
void RunRules(const MegatronLaunch& l, std::vector<std::string>& errors) {
  if (!l.Has("--train-iters") && !l.Has("--train-samples")) {
    errors.push_back("megatron/training/training.py: either train-iters or train-samples should be provided.");
  }
  if (l.Has("--train-iters") && !l.Has("--eval-interval")) {
    errors.push_back(
        "megatron/training/training.py get_train_valid_test_num_samples: --train-iters needs --eval-interval "
        "(train_iters // eval_interval)");
  }
  // validate_args allows at most one source; none is a run without data (Loom always writes one).
  const int sources = (l.Has("--mock-data") ? 1 : 0) + (l.Has("--data-path") ? 1 : 0);
  if (sources > 1) errors.push_back(fmt::format("{}: A single data source must be provided in training mode", kArgs));
  if (sources == 0)
    errors.push_back("megatron/training/training.py: no --data-path or --mock-data: nothing to train on");
  if (!l.Has("--lr")) {
    errors.push_back(
        "megatron/training/training.py get_optimizer_param_scheduler: --lr has no default, and "
        "OptimizerParamScheduler reads float(max_lr) (optimizer_param_scheduler.py)");
  }
  if (l.Value("--tokenizer-type") == "NullTokenizer" && !l.Has("--vocab-size")) {
    errors.push_back("megatron/training/tokenizer build_tokenizer: NullTokenizer needs --vocab-size");
  }
  if (l.Has("--make-vocab-size-divisible-by")) {
    if (Int(l, "--make-vocab-size-divisible-by", 0) < 1) {
      errors.push_back(
          fmt::format("megatron/training/tokenizer _vocab_size_with_padding: --make-vocab-size-divisible-by must be a "
                      "positive integer (got '{}'; its while loop never ends at 0)",
                      l.Value("--make-vocab-size-divisible-by")));
    }
  }
}

// The MIMO example's grids (pretrain_mimo.py, examples/mimo/training/args.py).
void MimoRules(const MegatronLaunch& l, std::vector<std::string>& errors) {
  const int64_t etp = Int(l, "--encoder-tp", 2), edp = Int(l, "--encoder-dp", 2), offset = Int(l, "--llm-offset", 4);
  const int64_t ltp = Int(l, "--llm-tp", 2), lcp = Int(l, "--llm-cp", 1), lpp = Int(l, "--llm-pp", 1);
  const int64_t ldp = Int(l, "--llm-dp", 2), mbs = Int(l, "--micro-batch-size", 0);
  const int64_t llm_size = ltp * lcp * lpp * ldp;
  if (lcp != 1) errors.push_back(fmt::format("{}: hetero MIMO training currently supports CP=1 only", kMimo));
  if (mbs > 0 && (mbs * ldp) % edp != 0) {
    errors.push_back(fmt::format(
        "{}: --micro-batch-size * --llm-dp * GTP must be divisible by --encoder-dp (got {} * {} * 1 % {} != 0)", kMimo,
        mbs, ldp, edp));
  }
  if (offset < etp * edp) {
    errors.push_back(fmt::format("{}: hetero MIMO expects disjoint module rank spans; spans overlap at [{}, {})", kMimo,
                                 offset, etp * edp));
  }
  if (offset != etp * edp || offset + llm_size != l.world_size) {
    errors.push_back(fmt::format(
        "{}: The non-colocated module grids must cover every torchrun rank exactly once; covered=[0, {}) + [{}, {}), "
        "world={}",
        kMimo, etp * edp, offset, offset + llm_size, l.world_size));
  }
  if (!l.Has("--use-distributed-optimizer")) {
    errors.push_back(
        "examples/mimo/pretrain_mimo.py: heterogeneous MIMO training requires --use-distributed-optimizer");
  }
  if (!l.Has("--calculate-per-token-loss")) {
    errors.push_back(
        "examples/mimo/model_providers/nemotron_moe_vlm.py: hetero MIMO training requires "
        "calculate_per_token_loss=True");
  }
  // The LLM grid's stock rules, validated with the world set to the LLM's ranks.
  MegatronLaunch llm = l;
  llm.flags.push_back({"--tensor-model-parallel-size", std::to_string(ltp)});
  llm.flags.push_back({"--pipeline-model-parallel-size", std::to_string(lpp)});
  llm.flags.push_back({"--context-parallel-size", std::to_string(lcp)});
  GridRules(llm, static_cast<int>(llm_size), errors);
}

// argparse: a flag the entry script does not define is "unrecognized
// arguments" (parse_args exits 2). The flags Loom writes, as Megatron-LM
// spells them (arguments.py and the dataclass fields argument_utils.py's
// ArgumentGroupFactory turns into flags; each parsed on CPU at d98e8a64),
// and the entry scripts' own.
void ParserRule(const MegatronLaunch& l, std::vector<std::string>& errors) {
  static const std::set<std::string> gpt = {"--tensor-model-parallel-size",
                                            "--pipeline-model-parallel-size",
                                            "--pipeline-model-parallel-layout",
                                            "--context-parallel-size",
                                            "--sequence-parallel",
                                            "--micro-batch-size",
                                            "--global-batch-size",
                                            "--recompute-granularity",
                                            "--recompute-method",
                                            "--recompute-num-layers",
                                            "--use-distributed-optimizer",
                                            "--overlap-grad-reduce",
                                            "--overlap-param-gather",
                                            "--num-layers",
                                            "--hidden-size",
                                            "--ffn-hidden-size",
                                            "--num-attention-heads",
                                            "--group-query-attention",
                                            "--num-query-groups",
                                            "--kv-channels",
                                            "--swiglu",
                                            "--normalization",
                                            "--position-embedding-type",
                                            "--rotary-base",
                                            "--disable-bias-linear",
                                            "--add-qkv-bias",
                                            "--qk-layernorm",
                                            "--untie-embeddings-and-output-weights",
                                            "--seq-length",
                                            "--max-position-embeddings",
                                            "--bf16",
                                            "--fp16",
                                            "--train-iters",
                                            "--train-samples",
                                            "--eval-interval",
                                            "--mock-data",
                                            "--data-path",
                                            "--tokenizer-type",
                                            "--vocab-size",
                                            "--make-vocab-size-divisible-by",
                                            "--img-h",
                                            "--img-w",
                                            "--patch-dim",
                                            "--encoder-num-layers",
                                            "--calculate-per-token-loss",
                                            "--norm-epsilon",
                                            "--use-rope-scaling",
                                            "--rope-scaling-factor",
                                            "--lr",
                                            "--eval-iters",
                                            "--ckpt-format",
                                            "--quick-geglu"};
  // pretrain_vlm.py add_vlm_extra_args; examples/mimo/training/args.py add_hetero_grid_args and its model provider.
  static const std::set<std::string> vlm = {"--freeze-LM", "--freeze-ViT", "--disable-vision-class-token"};
  static const std::set<std::string> mimo = {"--encoder-tp", "--encoder-dp",       "--llm-offset", "--llm-tp",
                                             "--llm-cp",     "--llm-pp",           "--llm-dp",     "--freeze-lm",
                                             "--freeze-vit", "--freeze-projection"};
  const bool is_vlm = l.entry == "pretrain_vlm.py", is_mimo = l.entry.find("pretrain_mimo") != std::string::npos;
  // Flags argparse reads as `type=int`: a value in another form ("1e+06") exits 2.
  static const std::set<std::string> ints = {"--tensor-model-parallel-size",
                                             "--pipeline-model-parallel-size",
                                             "--context-parallel-size",
                                             "--micro-batch-size",
                                             "--global-batch-size",
                                             "--num-layers",
                                             "--hidden-size",
                                             "--ffn-hidden-size",
                                             "--num-attention-heads",
                                             "--num-query-groups",
                                             "--kv-channels",
                                             "--rotary-base",
                                             "--seq-length",
                                             "--max-position-embeddings",
                                             "--train-iters",
                                             "--eval-interval",
                                             "--eval-iters",
                                             "--vocab-size",
                                             "--make-vocab-size-divisible-by",
                                             "--img-h",
                                             "--img-w",
                                             "--patch-dim",
                                             "--encoder-num-layers"};
  static const std::regex integer("-?[0-9]+");
  for (const auto& [flag, value] : l.flags) {
    if (ints.count(flag) && !std::regex_match(value, integer)) {
      errors.push_back(fmt::format("{}: error: argument {}: invalid int value: '{}'", l.entry, flag, value));
    }
    if (gpt.count(flag) || (is_vlm && vlm.count(flag)) || (is_mimo && mimo.count(flag))) continue;
    errors.push_back(fmt::format("{}: error: unrecognized arguments: {}", l.entry, flag));
  }
}

// pretrain_vlm.py's own asserts and what its providers cannot build.
void VlmRules(const MegatronLaunch& l, std::vector<std::string>& errors) {
  if (l.Value("--ckpt-format") != "torch") {
    errors.push_back("pretrain_vlm.py: Only ckpt-format torch is supported for VLM training currently.");
  }
  if (Int(l, "--context-parallel-size", 1) > 1 && Int(l, "--pipeline-model-parallel-size", 1) > 1) {
    errors.push_back("pretrain_vlm.py: PP+CP is not yet supported by this script.");
  }
  // model_provider deep-copies the language config, layout included, into
  // the vision encoder's: get_num_layers_to_build then gives the encoder the
  // first stage's decoder-layer count (transformer_block.py), and its
  // providers take no vp_stage (training.py get_model).
  if (l.Has("--pipeline-model-parallel-layout")) {
    errors.push_back(
        "pretrain_vlm.py model_provider: the vision encoder's config copies --pipeline-model-parallel-layout and "
        "builds the first stage's decoder-layer count (transformer_block.py get_num_layers_to_build), not "
        "--encoder-num-layers");
  }
}

// Sequence parallelism scatters each rank's sequence over TP along its first
// dimension (mappings.py _split_along_first_dim): the tokens a CP rank holds
// must divide by TP, or the first forward fails. pretrain_vlm.py pads its
// sequence to fit (context_parallel.get_padding).
void SequenceParallelRule(const MegatronLaunch& l, std::vector<std::string>& errors) {
  if (!l.Has("--sequence-parallel") || l.entry == "pretrain_vlm.py") return;
  const int64_t tp = Int(l, "--tensor-model-parallel-size", 1), cp = Int(l, "--context-parallel-size", 1);
  const int64_t seq = Int(l, "--seq-length", 0);
  if (seq > 0 && (seq % cp != 0 || (seq / cp) % tp != 0)) {
    errors.push_back(fmt::format(
        "megatron/core/tensor_parallel/mappings.py _split_along_first_dim: First dimension of the tensor should be "
        "divisible by tensor parallel size (--seq-length {} over context parallel {} is {} tokens a rank, which "
        "tensor parallel {} does not divide)",
        seq, cp, seq / cp, tp));
  }
}

}  // namespace

bool MegatronLaunch::Has(const std::string& flag) const {
  return std::any_of(flags.begin(), flags.end(), [&](const auto& f) { return f.first == flag; });
}

std::string MegatronLaunch::Value(const std::string& flag) const {
  std::string v;
  for (const auto& f : flags) {
    if (f.first == flag) v = f.second;  // argparse: the last one wins
  }
  return v;
}

std::vector<std::string> ParseMegatronLayout(const std::string& layout) {
  std::string s;
  for (char c : layout) {
    if (c != ',') s += c;
  }
  // (group)*N, one level, then x*N.
  static const std::regex group(R"(\(([^)]+)\)\*(\d+))"), single(R"((.)\*(\d+))");
  auto expand = [](const std::string& in, const std::regex& re) {
    std::string out;
    auto begin = std::sregex_iterator(in.begin(), in.end(), re);
    size_t last = 0;
    for (auto it = begin; it != std::sregex_iterator(); ++it) {
      out += in.substr(last, static_cast<size_t>(it->position()) - last);
      const int n = std::stoi((*it)[2].str());
      for (int k = 0; k < n; ++k) out += (*it)[1].str();
      last = static_cast<size_t>(it->position() + it->length());
    }
    return out + in.substr(last);
  };
  s = expand(expand(s, group), single);
  std::vector<std::string> stages(1);
  for (char c : s) {
    if (c == '|') {
      stages.emplace_back();
    } else if (c == 'E' || c == 'L' || c == 't' || c == 'm') {
      stages.back() += c;
    } else {
      throw Error(fmt::format(
          "megatron/core/transformer/pipeline_parallel_layer_layout.py parse_str_to_list: Invalid layer character: "
          "{} (layout_str={}), known layer characters: ['E', 'L', 't', 'm']",
          c, layout));
    }
  }
  return stages;
}

std::vector<std::string> MegatronArgumentErrors(const MegatronLaunch& launch) {
  std::vector<std::string> errors;
  ParserRule(launch, errors);
  if (launch.entry.find("pretrain_mimo") != std::string::npos) {
    MimoRules(launch, errors);
  } else {
    GridRules(launch, launch.world_size, errors);
    if (launch.entry == "pretrain_vlm.py") VlmRules(launch, errors);
  }
  SequenceParallelRule(launch, errors);
  RunRules(launch, errors);
  return errors;
}

int64_t MegatronModelVocab(int64_t vocab_flag, int64_t divisible_by, int tp) {
  const int64_t vocab = vocab_flag + 1;  // _NullTokenizer: its EOD id is vocab_flag
  const int64_t multiple = divisible_by * tp;
  return (vocab + multiple - 1) / multiple * multiple;
}

}  // namespace loom
