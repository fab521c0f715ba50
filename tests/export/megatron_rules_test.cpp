// Megatron-LM's argument rules as export/megatron_rules.h restates them
// from its source (NVIDIA/Megatron-LM d98e8a64, 2026-08-22; issue 43): each
// rule refuses what Megatron-LM refuses, with its message, and the cases
// the issue measured (MIMO's batch fan-out, --llm-pp 7 on 32 layers, a
// context-parallel LLM grid, no distributed optimizer, no
// CUDA_DEVICE_MAX_CONNECTIONS) are caught. Every bundle `--export megatron`
// writes for the demo's strategies passes them.
#include <gtest/gtest.h>

#include <algorithm>

#include "../plan/plan_test_util.h"
#include "loom/export/megatron_args.h"
#include "loom/export/megatron_rules.h"
#include "loom/session/compare_strategies.h"
#include "loom/session/strategy_list.h"
#include "test_util.h"

namespace loom {
namespace {

// A launch that passes: pretrain_gpt.py, TP 2 PP 2 DP 2 on 8 GPUs, Llama-3-8B's shape.
MegatronLaunch Gpt() {
  MegatronLaunch l;
  l.entry = "pretrain_gpt.py";
  l.world_size = 8;
  l.env = {{"CUDA_DEVICE_MAX_CONNECTIONS", "1"}};
  l.flags = {{"--tensor-model-parallel-size", "2"},
             {"--pipeline-model-parallel-size", "2"},
             {"--micro-batch-size", "1"},
             {"--global-batch-size", "16"},
             {"--num-layers", "32"},
             {"--hidden-size", "4096"},
             {"--num-attention-heads", "32"},
             {"--group-query-attention", ""},
             {"--num-query-groups", "8"},
             {"--seq-length", "4096"},
             {"--max-position-embeddings", "8192"},
             {"--bf16", ""},
             {"--train-iters", "10"},
             {"--lr", "0.0003"},
             {"--eval-interval", "10"},
             {"--mock-data", ""},
             {"--tokenizer-type", "NullTokenizer"},
             {"--vocab-size", "128256"}};
  return l;
}

// The MIMO example's reference grid (run_hetero_nemotron_20l_mock_train.sh, GTP 1): encoder TP 2 x DP 2
// on ranks 0-3, the LLM TP 2 x DP 2 on ranks 4-7.
MegatronLaunch Mimo() {
  MegatronLaunch l = Gpt();
  l.entry = "examples/mimo/pretrain_mimo.py";
  l.flags.erase(l.flags.begin(), l.flags.begin() + 2);  // the grid flags replace TP / PP
  for (auto f : std::vector<std::pair<std::string, std::string>>{{"--encoder-tp", "2"},
                                                                 {"--encoder-dp", "2"},
                                                                 {"--llm-offset", "4"},
                                                                 {"--llm-tp", "2"},
                                                                 {"--llm-pp", "1"},
                                                                 {"--llm-dp", "2"},
                                                                 {"--use-distributed-optimizer", ""},
                                                                 {"--calculate-per-token-loss", ""}}) {
    l.flags.push_back(f);
  }
  return l;
}

MegatronLaunch With(MegatronLaunch l, const std::string& flag, const std::string& value) {
  l.flags.push_back({flag, value});  // argparse: the last one wins
  return l;
}

MegatronLaunch Without(MegatronLaunch l, const std::string& flag) {
  l.flags.erase(std::remove_if(l.flags.begin(), l.flags.end(), [&](const auto& f) { return f.first == flag; }),
                l.flags.end());
  return l;
}

// The one error `l` gets must contain every part.
void ExpectRefused(const MegatronLaunch& l, const std::vector<std::string>& parts) {
  const std::vector<std::string> errors = MegatronArgumentErrors(l);
  ASSERT_FALSE(errors.empty()) << "accepted";
  std::string all;
  for (const auto& e : errors) all += e + "\n";
  for (const auto& p : parts) EXPECT_NE(all.find(p), std::string::npos) << p << "\n" << all;
}

TEST(MegatronRules, AValidLaunchPasses) {
  EXPECT_TRUE(MegatronArgumentErrors(Gpt()).empty());
  EXPECT_TRUE(MegatronArgumentErrors(Mimo()).empty());
}

TEST(MegatronRules, TheParserRefusesFlagsTheEntryScriptDoesNotDefine) {
  // Removed in July 2025 (commit b600e38d): what the old export wrote.
  ExpectRefused(With(Gpt(), "--encoder-pipeline-model-parallel-size", "1"),
                {"pretrain_gpt.py: error: unrecognized arguments: --encoder-pipeline-model-parallel-size"});
  // --freeze-LM is pretrain_vlm.py's, MIMO spells it --freeze-lm.
  ExpectRefused(With(Gpt(), "--freeze-LM", ""), {"unrecognized arguments: --freeze-LM"});
  MegatronLaunch vlm =
      With(With(Without(Without(Gpt(), "--pipeline-model-parallel-size"), "--sequence-parallel"), "--freeze-LM", ""),
           "--ckpt-format", "torch");
  vlm.entry = "pretrain_vlm.py";
  vlm.world_size = 4;
  EXPECT_TRUE(MegatronArgumentErrors(vlm).empty());
  // Typed values: argparse reads --rotary-base as an int (the audit's Qwen2 export wrote 1e+06).
  ExpectRefused(With(Gpt(), "--rotary-base", "1e+06"),
                {"pretrain_gpt.py: error: argument --rotary-base: invalid int value: '1e+06'"});
  ExpectRefused(With(Mimo(), "--freeze-LM", ""), {"unrecognized arguments: --freeze-LM"});
  EXPECT_TRUE(MegatronArgumentErrors(With(Mimo(), "--freeze-lm", "")).empty());
  ExpectRefused(With(Mimo(), "--encoder-pp", "2"), {"unrecognized arguments: --encoder-pp"});  // MIMO has none
}

TEST(MegatronRules, GridBatchAndShapeRules) {
  // validate_args: the world divides into TP x PP x CP.
  ExpectRefused(With(Gpt(), "--context-parallel-size", "3"), {"world size (8) is not divisible by total_model_size"});
  // The microbatch calculator: GBS a multiple of MBS x DP (DP 2 here).
  ExpectRefused(With(Gpt(), "--global-batch-size", "15"),
                {"num_microbatches_calculator.py",
                 "global batch size (15) is not divisible by micro batch size (1) "
                 "times data parallel size (2)"});
  // Required shapes; heads divide by TP; query groups a multiple or divisor of TP.
  ExpectRefused(Without(Gpt(), "--seq-length"), {"seq-length argument is None"});
  ExpectRefused(With(With(Gpt(), "--num-attention-heads", "33"), "--kv-channels", "128"),
                {"num_attention_heads (33) must be a multiple of tensor_model_parallel_size (2)."});
  ExpectRefused(With(With(Gpt(), "--tensor-model-parallel-size", "4"), "--num-query-groups", "3"),
                {"num_query_groups (3) must be a multiple or divisor of tensor_model_parallel_size (4)."});
  ExpectRefused(With(Gpt(), "--hidden-size", "4100"), {"hidden_size (4100) % num_attention_heads (32)"});
  // Context parallelism: the sequence splits into 2 x CP chunks.
  ExpectRefused(With(With(With(Gpt(), "--pipeline-model-parallel-size", "1"), "--context-parallel-size", "2"),
                     "--seq-length", "4095"),
                {"seq-length should be a multiple of 2 * context-parallel-size"});
  ExpectRefused(With(Gpt(), "--fp16", ""), {"--fp16 and --bf16 together"});
}

TEST(MegatronRules, PipelineLayersAndTheLayoutGrammar) {
  // Without a layout the layers divide by PP: the issue's --llm-pp 7 on 32 layers is this rule.
  ExpectRefused(With(With(Gpt(), "--pipeline-model-parallel-size", "4"), "--num-layers", "30"),
                {"Number of layers should be divisible by the pipeline-model-parallel size"});
  // A layout: any split, E first, L last, one each, t counting the layers, stages a multiple of PP.
  EXPECT_TRUE(
      MegatronArgumentErrors(With(With(Gpt(), "--num-layers", "30"), "--pipeline-model-parallel-layout", "Et*14|t*16L"))
          .empty());
  ExpectRefused(With(Gpt(), "--pipeline-model-parallel-layout", "Et*15|t*16L"),
                {"Number of decoder layers 31 must match num_layers 32"});
  ExpectRefused(With(Gpt(), "--pipeline-model-parallel-layout", "t*16|Et*16L"), {"The first layer must be embedding"});
  ExpectRefused(With(Gpt(), "--pipeline-model-parallel-layout", "Et*16|t*16|L"),
                {"The length of pipeline_model_parallel_layout must be divisible by pipeline_model_parallel_size "
                 "(num_stages=3"});
  ExpectRefused(With(Gpt(), "--pipeline-model-parallel-layout", "Et|(tt)|L"), {"Invalid layer character: ("});
  // parse_str_to_list: commas dropped, groups and characters repeated, empty stages kept.
  EXPECT_EQ(ParseMegatronLayout("(tt|)*2"), (std::vector<std::string>{"tt", "tt", ""}));
  EXPECT_EQ(ParseMegatronLayout("E|t*3,|L"), (std::vector<std::string>{"E", "ttt", "L"}));
  // An empty stage is allowed ("E||t|L" in Megatron-LM's docs): 4 stages on PP 2 are VPP 2.
  EXPECT_TRUE(
      MegatronArgumentErrors(With(With(Gpt(), "--num-layers", "2"), "--pipeline-model-parallel-layout", "E||tt|L"))
          .empty());
  // Interleaving: the schedule needs a multiple of PP microbatches (16 / (1 x 2) = 8 here; 6 is not).
  ExpectRefused(With(With(Gpt(), "--global-batch-size", "6"), "--pipeline-model-parallel-layout", "Et*8|t*8|t*8|t*8L"),
                {"forward_backward_pipelining_with_interleaving: 3 microbatches with pipeline-parallel size 2"});
}

TEST(MegatronRules, RecomputeOverlapEnvironmentAndRunRules) {
  ExpectRefused(With(Gpt(), "--recompute-granularity", "full"), {"recompute_method must be \"block\" or \"uniform\""});
  ExpectRefused(With(With(Gpt(), "--recompute-granularity", "selective"), "--recompute-method", "uniform"),
                {"recompute method is not yet supported for selective recomputing granularity"});
  ExpectRefused(With(Gpt(), "--overlap-param-gather", ""), {"--overlap-param-gather only supported"});
  // Before Blackwell, TP or CP needs CUDA_DEVICE_MAX_CONNECTIONS=1 (the issue: exports passed only with it set by
  // hand).
  MegatronLaunch no_env = Gpt();
  no_env.env.clear();
  ExpectRefused(no_env, {"require setting the environment variable CUDA_DEVICE_MAX_CONNECTIONS to 1"});
  no_env.blackwell = true;
  EXPECT_TRUE(MegatronArgumentErrors(no_env).empty());
  ExpectRefused(Without(Gpt(), "--eval-interval"), {"--train-iters needs --eval-interval"});
  ExpectRefused(Without(Gpt(), "--train-iters"), {"either train-iters or train-samples should be provided."});
  ExpectRefused(Without(Gpt(), "--mock-data"), {"no --data-path or --mock-data"});
  ExpectRefused(With(Gpt(), "--data-path", "corpus"), {"A single data source must be provided"});
  // The optimizer's scheduler reads float(args.lr), which has no default (audit M6-01).
  ExpectRefused(Without(Gpt(), "--lr"), {"--lr has no default"});
  // Sequence parallelism scatters each CP rank's tokens over TP (audit M6-07: 1001 tokens on TP 4).
  ExpectRefused(
      With(With(With(Gpt(), "--tensor-model-parallel-size", "4"), "--sequence-parallel", ""), "--seq-length", "1001"),
      {"_split_along_first_dim", "--seq-length 1001 over context parallel 1"});
  EXPECT_TRUE(MegatronArgumentErrors(With(Gpt(), "--sequence-parallel", "")).empty());
  ExpectRefused(Without(Gpt(), "--vocab-size"), {"NullTokenizer needs --vocab-size"});
  ExpectRefused(With(Gpt(), "--make-vocab-size-divisible-by", "0"),
                {"_vocab_size_with_padding: --make-vocab-size-divisible-by must be a positive integer (got '0'"});
}

// pretrain_vlm.py's own asserts and what its model provider cannot build
// (audit M6-02, M6-04, M6-06).
TEST(MegatronRules, ThePretrainVlmScriptsRules) {
  MegatronLaunch vlm = With(Without(Gpt(), "--pipeline-model-parallel-size"), "--ckpt-format", "torch");
  vlm.entry = "pretrain_vlm.py";
  vlm.world_size = 4;
  EXPECT_TRUE(MegatronArgumentErrors(vlm).empty());
  ExpectRefused(Without(vlm, "--ckpt-format"), {"Only ckpt-format torch is supported for VLM training"});
  MegatronLaunch staged =
      With(With(vlm, "--pipeline-model-parallel-size", "2"), "--pipeline-model-parallel-layout", "Et*14|t*18L");
  staged.world_size = 8;
  ExpectRefused(staged, {"the vision encoder's config copies --pipeline-model-parallel-layout"});
}

TEST(MegatronRules, TheMimoExamplesRules) {
  // The MMScale and DistTrain exports: MBS x llm_dp not divisible by encoder_dp.
  ExpectRefused(With(With(Mimo(), "--encoder-dp", "4"), "--encoder-tp", "1"),
                {"--micro-batch-size * --llm-dp * GTP must be divisible by --encoder-dp (got 1 * 2 * 1 % 4 != 0)"});
  // Entrain's context parallelism: MIMO's LLM grid runs CP 1 only (never dropped silently).
  ExpectRefused(With(With(Mimo(), "--llm-cp", "2"), "--llm-dp", "1"), {"supports CP=1 only"});
  // pretrain_mimo.py requires the distributed optimizer and per-token losses.
  ExpectRefused(Without(Mimo(), "--use-distributed-optimizer"), {"requires --use-distributed-optimizer"});
  ExpectRefused(Without(Mimo(), "--calculate-per-token-loss"), {"calculate_per_token_loss=True"});
  // The grids cover the world exactly once.
  ExpectRefused(With(Mimo(), "--llm-offset", "2"), {"spans overlap"});
  MegatronLaunch small = Mimo();
  small.world_size = 10;
  ExpectRefused(small, {"must cover every torchrun rank exactly once"});
  // The LLM grid's own rules, run on its ranks: --llm-pp 7 on 32 layers without a layout.
  MegatronLaunch pp7 = With(With(Mimo(), "--llm-pp", "7"), "--llm-dp", "1");
  pp7.flags.push_back({"--llm-tp", "1"});
  pp7.world_size = 4 + 7;
  ExpectRefused(pp7, {"Number of layers should be divisible by the pipeline-model-parallel size"});
}

// vlm-s's demo problem: every strategy's best plan either exports a bundle
// Megatron-LM's rules accept, with what a launch needs, or is refused with a reason.
TEST(MegatronRules, EveryDemoStrategyExportsAnAcceptedBundleOrSaysWhyNot) {
  const Model model = LoadModel("vlm-s");
  const Cluster cluster = LoadCluster("h800:2x8");
  Workload w = LoadWorkload("obelics");
  w.global_batch = 32;
  const Comparison cmp = CompareStrategies(model, cluster, w, ParseStrategyList("all"), 1);
  int exported = 0, refused = 0;
  for (const auto& o : cmp.outcomes) {
    if (!o.ok()) continue;
    SCOPED_TRACE(o.name);
    const MegatronExport e = ExportMegatron(o.result.plan, model, MegatronTarget{});
    if (!e.expressible) {
      ++refused;
      EXPECT_FALSE(e.notes.empty());
      continue;
    }
    ++exported;
    EXPECT_TRUE(MegatronArgumentErrors(e.launch).empty());
    for (const char* needed :
         {"--num-layers", "--hidden-size", "--seq-length", "--micro-batch-size", "--train-iters"}) {
      EXPECT_TRUE(e.launch.Has(needed)) << needed;
    }
    EXPECT_FALSE(e.launch.entry.empty());
  }
  EXPECT_GT(exported, 0);  // megatron at least: current Megatron-LM's own layout
  EXPECT_GT(refused, 0);
  const auto megatron = std::find_if(cmp.outcomes.begin(), cmp.outcomes.end(),
                                     [](const StrategyOutcome& o) { return o.name == "megatron"; });
  ASSERT_NE(megatron, cmp.outcomes.end());
  EXPECT_TRUE(ExportMegatron(megatron->result.plan, model).expressible);
}

}  // namespace
}  // namespace loom
