#include "loom/export/megatron_args.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "loom/cost/token_stats.h"

namespace loom {

namespace {

// Which Megatron-LM each form targets (docs/cli.md, "--export megatron").
constexpr const char* kLayoutVersion =
    "Megatron-LM core 0.13 and later (`--pipeline-model-parallel-layout`; the `--encoder-*-parallel-size` flags were "
    "removed in July 2025)";
constexpr const char* kMimoVersion =
    "Megatron-LM's MIMO example (examples/mimo, 2025): the encoder and the LLM on their own rank grids";

bool WholeModuleFrozen(const Module& m) {
  for (const auto& l : m.layers) {
    if (!l.frozen) return false;
  }
  return true;
}

bool AnyLayerFrozen(const Module& m) {
  for (const auto& l : m.layers) {
    if (l.frozen) return true;
  }
  return false;
}

// Megatron's freezing flags (its LLaVA / MIMO examples): the whole LLM, the
// whole vision encoder. Anything finer is a note.
void FreezeArgs(const Model& model, std::vector<std::string>& args, std::vector<std::string>& notes) {
  for (const auto& m : model.modules) {
    if (!AnyLayerFrozen(m)) continue;
    const bool whole = WholeModuleFrozen(m);
    if (whole && m.role == ModuleRole::kBackbone) {
      args.push_back("--freeze-LM");
    } else if (whole && m.modality == Modality::kImage && m.role == ModuleRole::kEncoder) {
      args.push_back("--freeze-ViT");
    } else {
      notes.push_back(
          fmt::format("{} is {}frozen; Megatron-LM's flags freeze only the whole LLM (--freeze-LM) or "
                      "the whole vision encoder (--freeze-ViT): freeze it in your model code",
                      m.name, whole ? "" : "partly "));
    }
  }
}

// Data-parallel replicas as Megatron-LM counts them: the unit's replicas,
// times the members of each group that share sequences (pp 1 only).
int EffectiveDp(const Unit& u, const Plan& plan) {
  return u.pipelines[0].replicas * std::max(1, plan.group_gpus / (u.tp * u.cp));
}

void BatchArgs(const Plan& plan, int dp, int microbatches, std::vector<std::string>& args) {
  args.push_back(fmt::format("--micro-batch-size {}", plan.global_batch / (static_cast<int64_t>(dp) * microbatches)));
  args.push_back(fmt::format("--global-batch-size {}", plan.global_batch));
}

void RecomputeArgs(const Unit& u, std::vector<std::string>& args) {
  if (u.recompute == Recompute::kFull) {
    args.push_back("--recompute-granularity full");
    args.push_back("--recompute-method uniform");
    args.push_back("--recompute-num-layers 1");
  } else if (u.recompute == Recompute::kSelective) {
    args.push_back("--recompute-granularity selective");
  }
}

// "--flag value" strings as (flag, value) pairs; a quoted value loses its quotes.
std::vector<std::pair<std::string, std::string>> FlagPairs(const std::vector<std::string>& args) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& a : args) {
    const size_t space = a.find(' ');
    std::string value = space == std::string::npos ? "" : a.substr(space + 1);
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"') value = value.substr(1, value.size() - 2);
    out.push_back({a.substr(0, space), value});
  }
  return out;
}

// The LLM's shape as Megatron-LM's GPT flags (its transformer layers, GQA,
// head_dim, SwiGLU, RMSNorm, rotary positions, biases, q/k norms, untied
// head), the sequence, the precision, and what a run needs: iterations,
// evaluation interval, mock data with a tokenizer of the model's vocabulary.
// Megatron-LM's MLP activation flags (argument_utils.py): a gated MLP is
// SiLU (--swiglu) or quick GELU (--quick-geglu); an ungated one GELU (the
// default). Another pairing has no flag: why, or "" with the flag in `flag`.
std::string MlpActivation(const Layer& b, std::string& flag) {
  const Activation a = b.activation;
  if (b.gated_mlp && (a == Activation::kDefault || a == Activation::kSilu)) {
    flag = "--swiglu";
  } else if (b.gated_mlp && a == Activation::kQuickGelu) {
    flag = "--quick-geglu";
  } else if (!b.gated_mlp && (a == Activation::kDefault || a == Activation::kGelu)) {
    flag = "";
  } else {
    return fmt::format(
        "its LLM's {} MLP uses {}; Megatron-LM's flags give a gated MLP SiLU (--swiglu) or quick GELU "
        "(--quick-geglu) and an ungated one GELU",
        b.gated_mlp ? "gated" : "ungated", ActivationName(a));
  }
  return "";
}

// The mock run's vocabulary flags: --vocab-size V - 1 (NullTokenizer adds
// its end-of-document id) and the largest --make-vocab-size-divisible-by of
// 128 (Megatron's default), 64, ..., 1 whose multiple of `tp` divides V, so
// that MegatronModelVocab is the plan's V. Where `tp` does not divide V,
// Megatron-LM must pad to a multiple of it (its vocabulary-parallel layers
// split evenly; Loom's runtime splits unevenly): a note says by how much.
void VocabFlags(int64_t vocab, int tp, std::vector<std::pair<std::string, std::string>>& f,
                std::vector<std::string>& notes) {
  vocab = std::max<int64_t>(vocab, 1);  // (an LLM without an embedding: a placeholder of one id)
  int64_t divisible_by = 128;
  while (divisible_by > 1 && vocab % (divisible_by * tp) != 0) divisible_by /= 2;
  f.push_back({"--make-vocab-size-divisible-by", std::to_string(divisible_by)});
  f.push_back({"--vocab-size", std::to_string(vocab - 1)});
  const int64_t model_vocab = MegatronModelVocab(vocab - 1, divisible_by, tp);
  if (model_vocab != vocab) {
    notes.push_back(fmt::format(
        "Megatron-LM pads the vocabulary of {} to {} (a multiple of TP {}): {} more rows in the embedding and the "
        "output layer than the plan prices",
        vocab, model_vocab, tp, model_vocab - vocab));
  }
}

// pretrain_vlm.py's image flags for the model's image encoder: --img-h,
// --img-w and --patch-dim of its square images, --encoder-num-layers, and
// --disable-vision-class-token where the LLM gets the patches only. Its mock
// data puts one image before --seq-length text tokens in each sample, and
// model_provider makes the LLM's sequence --seq-length plus
// get_num_image_embeddings (CLIP: (img / patch)^2, plus the class token
// unless disabled): returns the plan's sequence `seq_len` less those, for
// --seq-length. What the flags cannot match goes to `notes`.
int64_t VlmImageArgs(const Model& model, int64_t seq_len, std::vector<std::string>& a,
                     std::vector<std::string>& notes) {
  const Module* vision = nullptr;
  for (const Module& m : model.modules) {
    if (m.tokens.source == TokenSource::kImage && vision == nullptr) vision = &m;
  }
  if (vision == nullptr) return seq_len;
  const TokenRule& r = vision->tokens;
  const int64_t side = r.resize_px, patch = r.patch_px;
  if (side <= 0 || patch <= 0 || r.tokens_per_image > 0) {
    notes.push_back(fmt::format(
        "{} does not resize its images to one square size cut in patches; set pretrain_vlm.py's --img-h, --img-w "
        "and --patch-dim, and --seq-length to the text tokens",
        vision->name));
    return seq_len;
  }
  int layers = 0;
  for (const Layer& l : vision->layers) layers += l.kind == LayerKind::kTransformer ? 1 : 0;
  const int64_t patches = (side / patch) * (side / patch);
  // What the plan hands the LLM per image: the encoder's tokens less those
  // dropped, merged, or a fixed count.
  const int64_t handed = r.out_tokens_per_image > 0
                             ? r.out_tokens_per_image
                             : (ImageTokens(r, side, side) - r.drop_tokens) / std::max<int64_t>(r.merge * r.merge, 1);
  const bool class_token = handed == patches + 1;
  const int64_t embeddings = patches + (class_token ? 1 : 0);
  a.push_back(fmt::format("--img-h {}", side));
  a.push_back(fmt::format("--img-w {}", side));
  a.push_back(fmt::format("--patch-dim {}", patch));
  if (layers > 0) a.push_back(fmt::format("--encoder-num-layers {}", layers));
  if (!class_token) a.push_back("--disable-vision-class-token");
  if (handed != embeddings || r.tiling != ImageTiling::kNone) {
    notes.push_back(fmt::format(
        "pretrain_vlm.py's CLIP encoder hands the LLM {} embeddings an image (no merge or tiling), where {} hands "
        "on {}",
        embeddings, vision->name, handed));
  }
  notes.push_back(fmt::format(
      "pretrain_vlm.py's mock data puts one image ({} embeddings) before the {} text tokens of each sample, the "
      "plan's {}-token sequence; samples of several images run with one",
      embeddings, std::max<int64_t>(seq_len - embeddings, 1), seq_len));
  return std::max<int64_t>(seq_len - embeddings, 1);
}

// Returns why Megatron-LM's flags cannot build the LLM's shape ("": they can).
// `tp`: the LLM's tensor-parallel size; what differs from the plan goes to `notes`.
std::string ShapeAndRunFlags(const Module& llm, const MegatronTarget& target, int tp,
                             std::vector<std::pair<std::string, std::string>>& f, std::vector<std::string>& notes) {
  int layers = 0;
  const Layer* block = nullptr;
  int64_t vocab = 0;
  bool tied = false;
  for (const auto& l : llm.layers) {
    if (l.kind == LayerKind::kTransformer) {
      ++layers;
      block = &l;
    }
    if (l.kind == LayerKind::kEmbedding) vocab = l.vocab;
    if (l.kind == LayerKind::kLmHead) tied = l.tied;
  }
  if (block == nullptr) return "";
  const Layer& b = *block;
  std::string activation;
  if (std::string why = MlpActivation(b, activation); !why.empty()) return why;
  f.push_back({"--num-layers", std::to_string(layers)});
  f.push_back({"--hidden-size", std::to_string(b.hidden)});
  f.push_back({"--ffn-hidden-size", std::to_string(b.ffn_hidden)});
  f.push_back({"--num-attention-heads", std::to_string(b.heads)});
  if (b.kv_heads > 0 && b.kv_heads != b.heads) {
    f.push_back({"--group-query-attention", ""});
    f.push_back({"--num-query-groups", std::to_string(b.kv_heads)});
  }
  if (b.head_dim > 0 && b.head_dim * b.heads != b.hidden) f.push_back({"--kv-channels", std::to_string(b.head_dim)});
  if (!activation.empty()) f.push_back({activation, ""});
  if (b.norm == NormKind::kRmsNorm) f.push_back({"--normalization", "RMSNorm"});
  // TransformerConfig.layernorm_epsilon's flag; Megatron-LM's default is 1e-5.
  if (b.norm_eps != 1e-5) f.push_back({"--norm-epsilon", fmt::format("{}", b.norm_eps)});
  if (b.rope.theta > 0) {
    f.push_back({"--position-embedding-type", "rope"});
    // argparse reads it as an int (arguments.py `--rotary-base`, type=int):
    // "1e+06" exits 2. Every published base is a whole number.
    f.push_back({"--rotary-base", std::to_string(std::llround(b.rope.theta))});
    // Megatron-LM's Llama 3 scaling fixes the low and high frequency factors
    // and the original length at Llama 3.1's 1, 4 and 8192; only the factor is a flag.
    if (b.rope.scaling == RopeScaling::kLlama3) {
      f.push_back({"--use-rope-scaling", ""});
      f.push_back({"--rope-scaling-factor", fmt::format("{}", b.rope.factor)});
    }
  }
  if (!b.out_bias && !b.mlp_bias) {
    f.push_back({"--disable-bias-linear", ""});
    if (b.qkv_bias) f.push_back({"--add-qkv-bias", ""});
  }
  if (b.qk_norm) f.push_back({"--qk-layernorm", ""});
  if (!tied) f.push_back({"--untie-embeddings-and-output-weights", ""});
  f.push_back({"--seq-length", std::to_string(target.seq_len)});
  f.push_back({"--max-position-embeddings", std::to_string(std::max<int64_t>(target.seq_len, b.rope.max_positions))});
  if (target.precision == "bf16") f.push_back({"--bf16", ""});
  if (target.precision == "fp16") f.push_back({"--fp16", ""});
  f.push_back({"--train-iters", std::to_string(target.train_iters)});
  // The scheduler reads float(args.lr), which has no default (training.py
  // get_optimizer_param_scheduler): `loom run`'s default peak rate, for the
  // user to set as their run needs.
  f.push_back({"--lr", fmt::format("{}", target.lr)});
  f.push_back({"--eval-interval", std::to_string(target.train_iters)});
  f.push_back({"--eval-iters", "0"});  // no validation passes the plan does not price (the default runs 100)
  f.push_back({"--mock-data", ""});
  f.push_back({"--tokenizer-type", "NullTokenizer"});
  VocabFlags(vocab, tp, f, notes);
  return "";
}

// The launch of `flags` checked by Megatron-LM's rules: an expressible
// bundle, or the rules it breaks. `tp_or_cp`: some grid splits layers or
// sequences, which needs CUDA_DEVICE_MAX_CONNECTIONS=1 before Blackwell.
void Finish(MegatronExport& e, MegatronLaunch launch, const MegatronTarget& target, bool tp_or_cp) {
  launch.blackwell = target.blackwell;
  if (tp_or_cp && !target.blackwell) launch.env.push_back({"CUDA_DEVICE_MAX_CONNECTIONS", "1"});
  const std::vector<std::string> errors = MegatronArgumentErrors(launch);
  if (!errors.empty()) {
    e.expressible = false;
    e.notes = "Megatron-LM would refuse these arguments: " + fmt::format("{}", fmt::join(errors, "; ")) + ".";
    return;
  }
  std::vector<std::string> shown;
  for (const auto& [flag, value] : launch.flags) {
    const bool quote = value.find_first_of("|*()") != std::string::npos;
    shown.push_back(value.empty() ? flag : quote ? fmt::format("{} \"{}\"", flag, value) : flag + " " + value);
  }
  e.args = fmt::format("{}", fmt::join(shown, " \\\n  "));
  e.launch = std::move(launch);
  e.expressible = true;
}

// Reasons a unit cannot be one Megatron-LM rank grid.
void UnitObstacles(const Unit& u, const Plan& plan, std::vector<std::string>& why) {
  if (u.pipelines.size() != 1) {
    why.push_back(
        fmt::format("unit {} runs {} pipeline templates of different depths as data-parallel replicas "
                    "(Oobleck); Megatron-LM replicas are identical",
                    u.name, u.pipelines.size()));
  }
  if (u.sm_fraction < 1) why.push_back("it gives a unit a fraction of each GPU's SMs (Green Contexts)");
  if (u.zero_stage > 1) {
    why.push_back(
        fmt::format("it uses ZeRO stage {}; Megatron-LM's distributed optimizer shards optimizer state "
                    "only (stage 1)",
                    u.zero_stage));
  }
  for (const auto& p : u.pipelines) {
    // Without a pipeline, sequences shared inside a group are data parallelism (EffectiveDp).
    if (u.tp * u.cp != plan.group_gpus && p.pp > 1) {
      why.push_back(
          fmt::format("unit {} shares sequences inside each pipeline stage's GPU group instead of splitting "
                      "every module by TP; Megatron-LM's data-parallel replicas are whole pipelines",
                      u.name));
    }
    if (!p.rank_groups.empty() && p.groups() != p.pp) {
      why.push_back("its pipeline ranks span different GPU counts; Megatron-LM gives every stage the same");
    }
    if (p.schedule == ScheduleKind::kCustom) {
      why.push_back(
          "it runs a custom per-batch order; Megatron-LM's schedules are 1F1B and interleaved 1F1B "
          "(export the order for PyTorch instead: `loom simulate --plan ... --export-pytorch-csv`)");
    }
    if (p.vpp() > 1 && p.pp < 2) {
      why.push_back(
          fmt::format("it interleaves {} chunks on a single pipeline rank; Megatron-LM interleaves only "
                      "across pipeline ranks (pipeline parallel size >= 2)",
                      p.vpp()));
    }
    for (size_t s = 0; s < p.stages.size(); ++s) {
      if (p.stages[s].rank != static_cast<int>(s) % p.pp) {
        why.push_back(fmt::format("stage {} is on rank {}; Megatron-LM puts virtual stage v on rank v mod pp", s,
                                  p.stages[s].rank));
        break;
      }
    }
    for (const auto& st : p.stages) {
      if (st.tp > 0 && st.tp != u.tp) {
        why.push_back("a stage runs its own tensor-parallel degree; Megatron-LM uses one for every stage");
        break;
      }
    }
  }
}

// "0..7, 9" for ascending stage indices.
std::string Ranges(const std::vector<int>& v) {
  std::string out;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") + (j > i ? fmt::format("{}..{}", v[i], v[j]) : std::to_string(v[i]));
    i = j + 1;
  }
  return out;
}

// The backbone's layers of one stage in Megatron's layout symbols: E the
// embedding, t a decoder layer, L the output layer and loss. Empty string and
// a reason when a layer has no symbol.
std::string StageLayout(const StageSpec& stage, const Model& model, const std::string& backbone, std::string* why) {
  std::string out;
  int run = 0;
  auto flush = [&] {
    if (run == 1) out += "t";
    if (run > 1) out += fmt::format("t*{}", run);
    run = 0;
  };
  for (const auto& r : stage.layers) {
    if (r.module != backbone) continue;
    const Module& m = model.modules[model.FindModule(r.module)];
    for (int l = r.begin; l < r.end; ++l) {
      switch (m.layers[l].kind) {
        case LayerKind::kTransformer:
          ++run;
          break;
        case LayerKind::kEmbedding:
          flush();
          out += "E";
          break;
        case LayerKind::kLmHead:
          flush();
          out += "L";
          break;
        default:
          *why = fmt::format("{} layer {} is a {}, which Megatron-LM's GPT layout has no symbol for", r.module, l,
                             LayerKindName(m.layers[l].kind));
          return "";
      }
    }
  }
  flush();
  return out;
}

MegatronExport ExportOneGrid(const Plan& plan, const Model& model, const MegatronTarget& target) {
  MegatronExport e;
  std::vector<std::string> why, notes;
  const Unit& u = plan.units[0];
  UnitObstacles(u, plan, why);
  int backbone = -1;
  for (size_t i = 0; i < model.modules.size(); ++i) {
    if (model.modules[i].role == ModuleRole::kBackbone) backbone = static_cast<int>(i);
  }
  if (backbone < 0) why.push_back("the model has no backbone module (an LLM) for Megatron-LM's GPT/LLaVA models");
  for (size_t i = 0; backbone >= 0 && i < model.modules.size(); ++i) {
    if (static_cast<int>(i) > backbone && model.modules[i].role != ModuleRole::kBackbone) {
      why.push_back(fmt::format("{} runs after the LLM (a {}); Megatron-LM's multimodal models end with the LLM",
                                model.modules[i].name, ModuleRoleName(model.modules[i].role)));
    }
  }
  const PipelineSpec& p = u.pipelines[0];
  std::string layout;
  if (why.empty()) {
    const std::string bb = model.modules[backbone].name;
    int last_encoder_stage = -1;
    std::vector<int> empty_stages;
    for (size_t s = 0; s < p.stages.size(); ++s) {
      std::string bad;
      const std::string part = StageLayout(p.stages[s], model, bb, &bad);
      if (!bad.empty()) {
        why.push_back(bad);
        break;
      }
      if (part.empty()) empty_stages.push_back(static_cast<int>(s));
      layout += (s == 0 ? "" : "|") + part;
      for (const auto& r : p.stages[s].layers) {
        if (r.module != bb) last_encoder_stage = static_cast<int>(s);
      }
    }
    if (why.empty() && !empty_stages.empty()) {
      why.push_back(
          fmt::format("stages {} hold no LLM layer (encoders only); Megatron-LM runs the encoders with the "
                      "first stage's LLM layers and cannot give them stages of their own (the "
                      "--encoder-pipeline-model-parallel-size that did was removed in July 2025)",
                      Ranges(empty_stages)));
    } else if (last_encoder_stage > 0) {
      notes.push_back(
          fmt::format("the plan spreads the encoders over stages 0..{}; Megatron-LM runs every encoder "
                      "and projector with the first pipeline stage, so that stage will be heavier than "
                      "planned (a layout with fewer LLM layers there balances it)",
                      last_encoder_stage));
    }
    if (p.schedule == ScheduleKind::kZbH1) {
      notes.push_back("the plan runs ZB-H1 (split backward); Megatron-LM will run 1F1B, with the larger bubble");
    }
  }
  if (model.modules.size() > 1 && p.stages.size() > 1) {
    why.push_back(
        "pretrain_vlm.py builds its vision encoder from a copy of the language model's config, layout included, so "
        "with pipeline stages it gets the first stage's decoder-layer count instead of its own "
        "(pretrain_vlm.py model_provider, transformer_block.py get_num_layers_to_build), and its providers take no "
        "virtual stage; Megatron-LM's VLM example trains one pipeline stage (pipeline parallel size 1)");
  }
  if (!why.empty()) {
    e.notes = "Megatron-LM cannot express this plan: " + fmt::format("{}", fmt::join(why, "; ")) + ".";
    return e;
  }
  std::vector<std::string> a;
  a.push_back(fmt::format("--tensor-model-parallel-size {}", u.tp));
  a.push_back(fmt::format("--pipeline-model-parallel-size {}", p.pp));
  if (p.stages.size() > 1) a.push_back(fmt::format("--pipeline-model-parallel-layout \"{}\"", layout));
  if (u.cp > 1) a.push_back(fmt::format("--context-parallel-size {}", u.cp));
  if (u.tp > 1 && u.sequence_parallel) a.push_back("--sequence-parallel");
  BatchArgs(plan, EffectiveDp(u, plan), p.microbatches, a);
  RecomputeArgs(u, a);
  if (u.zero_stage == 1) a.push_back("--use-distributed-optimizer");
  a.push_back("--overlap-grad-reduce");
  MegatronLaunch launch;
  const bool multimodal = model.modules.size() > 1;
  launch.entry = multimodal ? "pretrain_vlm.py" : "pretrain_gpt.py";
  if (multimodal) {
    FreezeArgs(model, a, notes);         // --freeze-LM / --freeze-ViT are pretrain_vlm.py's flags
    a.push_back("--ckpt-format torch");  // pretrain_vlm.py asserts it ("Only ckpt-format torch is supported")
  }
  MegatronTarget llm_target = target;
  if (multimodal) llm_target.seq_len = VlmImageArgs(model, target.seq_len, a, notes);
  launch.flags = FlagPairs(a);
  if (std::string shape = ShapeAndRunFlags(model.modules[backbone], llm_target, u.tp, launch.flags, notes);
      !shape.empty()) {
    e.notes = "Megatron-LM cannot express this plan: " + shape + ".";
    return e;
  }
  launch.world_size = u.tp * u.cp * p.pp * EffectiveDp(u, plan);
  if (multimodal) {
    notes.push_back(
        "pretrain_vlm.py builds its vision encoder and projector with the LLM's TP on the first stage; give it "
        "your towers' shapes in its model provider (the flags above are the LLM's)");
  }
  Finish(e, std::move(launch), target, u.tp > 1 || u.cp > 1);
  if (!e.expressible) return e;
  std::string stages;
  for (size_t s = 0; s < p.stages.size(); ++s) {
    std::string label;
    for (const auto& r : p.stages[s].layers) {
      label += fmt::format("{}{}[{}:{}]", label.empty() ? "" : "+", r.module, r.begin, r.end);
    }
    stages += fmt::format("\n  stage {} (rank {}): {}", s, p.stages[s].rank, label);
  }
  e.notes = fmt::format(
      "For {}: torchrun {}. {} microbatches per replica, data parallel {}{}.{}\nThe plan's stages (the layout "
      "above: E embedding, t decoder layer, L output layer and loss; virtual stage v on rank v mod "
      "{}):{}",
      kLayoutVersion, e.launch.entry, p.microbatches, EffectiveDp(u, plan),
      p.vpp() > 1 ? fmt::format(", {} virtual stages per rank", p.vpp()) : "",
      notes.empty() ? "" : "\nDiffers from the plan: " + fmt::format("{}", fmt::join(notes, "; ")) + ".", p.pp, stages);
  return e;
}

// Encoders on one rank grid, the LLM on another (MMScale, DistMM, DistTrain):
// the MIMO example's arguments.
MegatronExport ExportMimo(const Plan& plan, const Model& model, const MegatronTarget& target) {
  MegatronExport e;
  std::vector<std::string> why, notes;
  int llm = -1;
  for (size_t i = 0; i < plan.units.size(); ++i) {
    for (const auto& name : plan.units[i].modules) {
      if (model.modules[model.FindModule(name)].role == ModuleRole::kBackbone) llm = static_cast<int>(i);
    }
  }
  if (plan.units.size() != 2 || llm < 0) {
    why.push_back(
        fmt::format("it has {} units on separate GPUs or phases; Megatron-LM runs one grid for every "
                    "module, or (MIMO) one for the encoders and one for the LLM",
                    plan.units.size()));
  }
  if (why.empty()) {
    const Unit& enc = plan.units[1 - llm];
    const Unit& lm = plan.units[llm];
    for (const Unit* u : {&enc, &lm}) UnitObstacles(*u, plan, why);
    for (const auto& name : enc.modules) {
      if (model.modules[model.FindModule(name)].role == ModuleRole::kBackbone) why.push_back("both units hold an LLM");
    }
    for (const auto& name : lm.modules) {
      if (model.modules[model.FindModule(name)].role != ModuleRole::kBackbone) {
        why.push_back(fmt::format("{} shares the LLM's grid; MIMO's LLM grid holds the LLM alone", name));
      }
    }
    if (enc.phase != lm.phase) why.push_back("its units take turns on the same GPUs (temporal phases)");
    if (why.empty() && enc.pipelines[0].pp > 1) {
      why.push_back(fmt::format("the encoders are pipelined over {} ranks; MIMO's encoder grid has TP and DP only",
                                enc.pipelines[0].pp));
    }
    if (why.empty()) {
      const PipelineSpec& ep = enc.pipelines[0];
      const PipelineSpec& lp = lm.pipelines[0];
      std::vector<std::string> a;
      a.push_back(fmt::format("--encoder-tp {}", enc.tp));
      a.push_back(fmt::format("--encoder-dp {}", EffectiveDp(enc, plan)));
      a.push_back(fmt::format("--llm-offset {}", lm.first_group * plan.group_gpus));
      a.push_back(fmt::format("--llm-tp {}", lm.tp));
      if (lm.cp > 1) a.push_back(fmt::format("--llm-cp {}", lm.cp));  // refused below (CP 1 only), never dropped
      a.push_back(fmt::format("--llm-pp {}", lp.pp));
      a.push_back(fmt::format("--llm-dp {}", EffectiveDp(lm, plan)));
      if (lp.stages.size() > 1) {  // the LLM grid's stages exactly, as for one grid
        std::string layout, bad;
        for (size_t s = 0; s < lp.stages.size() && bad.empty(); ++s) {
          layout += (s == 0 ? "" : "|") + StageLayout(lp.stages[s], model, lm.modules[0], &bad);
        }
        if (bad.empty()) a.push_back(fmt::format("--pipeline-model-parallel-layout \"{}\"", layout));
      }
      BatchArgs(plan, EffectiveDp(lm, plan), lp.microbatches, a);
      RecomputeArgs(lm, a);
      // pretrain_mimo.py requires the distributed optimizer and per-token losses.
      a.push_back("--use-distributed-optimizer");
      a.push_back("--calculate-per-token-loss");
      for (const auto& m : model.modules) {
        if (!AnyLayerFrozen(m)) continue;
        if (m.role == ModuleRole::kBackbone && WholeModuleFrozen(m))
          a.push_back("--freeze-lm");
        else if (m.role == ModuleRole::kEncoder && WholeModuleFrozen(m))
          a.push_back("--freeze-vit");
        else if (m.role == ModuleRole::kProjector && WholeModuleFrozen(m))
          a.push_back("--freeze-projection");
        else
          notes.push_back(fmt::format("{} is partly frozen; MIMO freezes whole modules only", m.name));
      }
      if (ep.microbatches != lp.microbatches) {
        notes.push_back(
            fmt::format("the encoders run {} microbatches per replica and the LLM {}; MIMO hands each "
                        "LLM microbatch its encoder outputs as they come",
                        ep.microbatches, lp.microbatches));
      }
      // The example's one model provider (nemotron-moe-vlm) builds a hybrid
      // Mamba LLM from --hybrid-layer-pattern, which a transformer LLM has
      // none of: the bundle is the grids, the batch and the LLM's shape.
      notes.push_back(
          "the MIMO example's model provider (nemotron-moe-vlm) builds a hybrid Mamba LLM from "
          "--hybrid-layer-pattern; give it a provider of your encoders and transformer LLM, which these flags shape");
      MegatronLaunch launch;
      launch.entry = "examples/mimo/pretrain_mimo.py";
      launch.flags = FlagPairs(a);
      if (std::string shape =
              ShapeAndRunFlags(model.modules[model.FindModule(lm.modules[0])], target, lm.tp, launch.flags, notes);
          !shape.empty()) {
        e.notes = "Megatron-LM cannot express this plan: " + shape + ".";
        return e;
      }
      launch.world_size = enc.tp * EffectiveDp(enc, plan) + lm.tp * lm.cp * lp.pp * EffectiveDp(lm, plan);
      Finish(e, std::move(launch), target, enc.tp > 1 || lm.tp > 1 || lm.cp > 1);
      if (!e.expressible) return e;
      e.notes = fmt::format(
          "For {}. Encoders ({}) on GPUs {}..{}, the LLM on GPUs {}..{}.{}", kMimoVersion, fmt::join(enc.modules, ", "),
          enc.first_group * plan.group_gpus, (enc.first_group + enc.num_groups()) * plan.group_gpus - 1,
          lm.first_group * plan.group_gpus, (lm.first_group + lm.num_groups()) * plan.group_gpus - 1,
          notes.empty() ? "" : "\nDiffers from the plan: " + fmt::format("{}", fmt::join(notes, "; ")) + ".");
      return e;
    }
  }
  e.notes = "Megatron-LM cannot express this plan: " + fmt::format("{}", fmt::join(why, "; ")) + ".";
  return e;
}

}  // namespace

MegatronExport ExportMegatron(const Plan& plan, const Model& model, const MegatronTarget& target) {
  if (plan.units.empty()) {
    MegatronExport e;
    e.notes = "Megatron-LM cannot express this plan: it has no units.";
    return e;
  }
  return plan.units.size() == 1 ? ExportOneGrid(plan, model, target) : ExportMimo(plan, model, target);
}

namespace {

// "CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun --nnodes N --nproc-per-node G ENTRY",
// with the rendezvous every node needs where there are several, and the MIMO
// example run as a module from the repository's root (its imports are
// `examples.mimo.*`, which a script path would not find).
std::string CommandLine(const MegatronLaunch& l, int gpus_per_node) {
  std::string env;
  for (const auto& [k, v] : l.env) env += k + "=" + v + " ";
  const int per_node = std::min(l.world_size, std::max(1, gpus_per_node));
  const int nodes = (l.world_size + per_node - 1) / per_node;
  std::string entry = l.entry;
  if (entry.size() > 3 && entry.compare(entry.size() - 3, 3, ".py") == 0 && entry.find('/') != std::string::npos) {
    entry = "-m " + entry.substr(0, entry.size() - 3);
    std::replace(entry.begin(), entry.end(), '/', '.');
  }
  return fmt::format("{}torchrun --nnodes {} --nproc-per-node {}{} {}", env, nodes, per_node,
                     nodes > 1 ? " --node-rank $NODE_RANK --master-addr $MASTER_ADDR --master-port 29500" : "", entry);
}

}  // namespace

nlohmann::json MegatronExportJson(const MegatronExport& e) {
  nlohmann::json j;
  j["expressible"] = e.expressible;
  j["notes"] = e.notes;
  if (!e.expressible) return j;
  j["entry"] = e.launch.entry;
  j["env"] = nlohmann::json::object();
  for (const auto& [k, v] : e.launch.env) j["env"][k] = v;
  j["args"] = nlohmann::json::array();
  for (const auto& [flag, value] : e.launch.flags) {
    j["args"].push_back(flag);
    if (!value.empty()) j["args"].push_back(value);
  }
  j["world_size"] = e.launch.world_size;
  return j;
}

std::string FormatMegatronExport(const std::string& strategy, const MegatronExport& e, int gpus_per_node) {
  if (!e.expressible) return fmt::format("{}: {}\n", strategy, e.notes);
  return fmt::format("{}: Megatron-LM launch\n  {} \\\n  {}\n{}\n", strategy, CommandLine(e.launch, gpus_per_node),
                     e.args, e.notes);
}

}  // namespace loom
