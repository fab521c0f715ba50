// Issue 20: numbers past what Loom can hold are errors naming the field and
// the limit, checked before any conversion or allocation (a layer count of a
// billion, a 20-digit node count, a hidden size whose square overflows, a
// trillion-sample batch); text that is not UTF-8 is refused where it is read;
// the CLI exits 2 with the message instead of aborting.
#include <gtest/gtest.h>

#include "../plan/plan_test_util.h"
#include "loom/cost/calibration.h"
#include "loom/cost/layer_work.h"
#include "loom/cost/profile.h"
#include "loom/plan/compile_plan.h"
#include "loom/plan/plan_json.h"
#include "loom/report/simulation_report.h"
#include "loom/sim/plan_run.h"
#include "loom/spec/cluster.h"
#include "loom/spec/model.h"
#include "loom/spec/workload.h"
#include "test_util.h"

namespace loom {
namespace {

std::string Llm(const std::string& layer_fields, const std::string& name = "llm") {
  return "model: m\nmodules:\n  - name: " + name +
         "\n    role: backbone\n    modality: text\n    tokens: {source: text}\n    layers:\n"
         "      - {kind: embedding, vocab: 100, hidden: 64}\n"
         "      - {kind: transformer, " +
         layer_fields + "}\n";
}

TEST(Limits, ModelSizesAreBoundedBeforeTheyAreUsed) {
  EXPECT_NO_THROW(ParseModel(Llm("count: 4095, hidden: 64, ffn_hidden: 128, heads: 4"), "m.yaml"));
  test::ExpectError([] { ParseModel(Llm("count: 1000000000, hidden: 64, ffn_hidden: 128, heads: 4"), "m.yaml"); },
                    {"m.yaml:9:", "layers[1].count", "must be at most 4096", "1000000000"});
  // 4096 blocks and the embedding: past the model's layers (a plan at 10,000 ran for minutes).
  test::ExpectError([] { ParseModel(Llm("count: 4096, hidden: 64, ffn_hidden: 128, heads: 4"), "m.yaml"); },
                    {"m.yaml: model m has 4097 layers; valid: at most 4096 in all its modules"});
  // Widths of 2^24 multiply past int64 over a model: each layer's count is bounded (it read -5.9e18).
  Layer wide;
  wide.kind = LayerKind::kTransformer;
  wide.hidden = wide.ffn_hidden = wide.heads = wide.kv_heads = int64_t{1} << 24;
  test::ExpectError([&] { LayerParams(wide); }, {"a transformer layer of ", "parameters; valid: at most 2^50"});
  wide.hidden = wide.ffn_hidden = wide.heads = wide.kv_heads = 4096;
  EXPECT_GT(LayerParams(wide), 0);
  test::ExpectError([] { ParseModel(Llm("hidden: 1000000000000, ffn_hidden: 128, heads: 4"), "m.yaml"); },
                    {"layers[1].hidden", "must be at most 16777216"});
  // A double far past int64 is refused before the cast (no undefined behaviour).
  test::ExpectError([] { ParseModel(Llm("hidden: 64, ffn_hidden: 1e30, heads: 4"), "m.yaml"); },
                    {"ffn_hidden", "must be at most"});
  test::ExpectError([] { ParseModel(Llm("hidden: 64, ffn_hidden: 128, heads: .inf"), "m.yaml"); },
                    {"heads", "must be at most"});
  test::ExpectError([] { ParseModel(Llm("hidden: 64, ffn_hidden: 128, heads: 0"), "m.yaml"); },
                    {"heads", "must be > 0"});
}

TEST(Limits, ClusterSizesAreBounded) {
  EXPECT_EQ(LoadCluster("h100:65536x16").num_gpus(), 65536 * 16);
  test::ExpectError([] { LoadCluster("h100:99999999999999999999x8"); },
                    {"99999999999999999999 is out of range", "at most 65536 nodes"});
  test::ExpectError([] { LoadCluster("h100:1000000000x8"); }, {"at most 65536 nodes"});
  test::ExpectError([] { ParseCluster("cluster: c\ngpu: h100\nnodes: 1000000000\ngpus_per_node: 8\n", "c.yaml"); },
                    {"c.yaml:3:", "nodes", "must be at most 65536"});
  test::ExpectError([] { ParseCluster("cluster: c\ngpu: h100\nnodes: 2\ngpus_per_node: 64\n", "c.yaml"); },
                    {"gpus_per_node", "must be at most 16"});
  test::ExpectError([] { ParseCluster("cluster: c\ngpu: h100\ngpus_per_node: 8\n", "c.yaml"); }, {"nodes"});
}

TEST(Limits, GlobalBatchIsBounded) {
  const std::string w = "workload: w\nsource: {kind: text}\nglobal_batch: 1e12\n";
  test::ExpectError([&] { ParseWorkload(w, "w.yaml"); }, {"w.yaml:3:", "global_batch", "must be at most 16777216"});
  // A microbatch past the batch was accepted and ignored; a frame rate of 1e300
  // wrapped the frame count (second audit W012, W071).
  test::ExpectError(
      [] { ParseWorkload("workload: w\nsource: {kind: text}\nglobal_batch: 8\nmicrobatch_size: 16\n", "w.yaml"); },
      {"w.yaml:4:", "microbatch_size: 16 samples, more than global_batch 8; valid: 1..8"});
  test::ExpectError([] { ParseWorkload("workload: w\nsource: {kind: video, fps: 1e300}\n", "w.yaml"); },
                    {"w.yaml:2:", "source.fps: must be at most 1000 frames per second"});
  test::ExpectError([] { ParseWorkload("workload: w\nsource: {kind: video, max_video_s: 1e9}\n", "w.yaml"); },
                    {"source.max_video_s: must be at most 86400 s"});
  auto [code, out] = test::RunLoom(
      "simulate --model llama3-1b --cluster h100:1x8 --workload text --global-batch "
      "2000000000");
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("--global-batch: 2000000000 is out of range; valid: an integer in 1..16777216"),
            std::string::npos)
      << out;
  // Past int64 it is refused as given, not saturated first (the audit's D17).
  auto [code2, out2] = test::RunLoom(
      "simulate --model llama3-1b --cluster h100:1x8 --workload text --global-batch 99999999999999999999");
  EXPECT_EQ(code2, 2) << out2;
  EXPECT_NE(out2.find("'99999999999999999999' is not an integer in 1..16777216"), std::string::npos) << out2;
}

TEST(Limits, TextMustBeUtf8) {
  EXPECT_NO_THROW(ParseModel(Llm("hidden: 64, ffn_hidden: 128, heads: 4", "\"\xe8\xaf\xad\xe8\xa8\x80\""), "m.yaml"));
  for (const char* bad : {"\"x\xff\"", "\"x\xc3\"", "\"\xed\xa0\x80\"", "\"\xc0\xaf\""}) {
    SCOPED_TRACE(bad);
    test::ExpectError([&] { ParseModel(Llm("hidden: 64, ffn_hidden: 128, heads: 4", bad), "m.yaml"); },
                      {"m.yaml:3:", "name", "not valid UTF-8"});
  }
}

// yaml-cpp's recursive parser stops deep nesting with "bad file"; the error
// says what it is (third audit, M091). A few levels deep reads as usual.
TEST(Limits, DeepNestingIsSaidAsSuch) {
  const std::string deep = "name: x\nmodules: " + std::string(600, '[') + std::string(600, ']') + "\n";
  test::ExpectError([&] { ParseModel(deep, "deep.yaml"); },
                    {"deep.yaml:2:", "malformed YAML: nested too deeply: yaml-cpp's parser stops at depth"});
  const std::string shallow = "name: x\nmodules: " + std::string(20, '[') + std::string(20, ']') + "\n";
  try {
    ParseModel(shallow, "shallow.yaml");
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find("nested too deeply"), std::string::npos) << e.what();
  }
}

// A key twice in one mapping, infinities where a size is expected, plan
// integers past an int: errors naming the field, not silently read.
TEST(Limits, DuplicateKeysInfinitiesAndTruncationAreErrors) {
  test::ExpectError(
      [] { ParseModel("model: a\nmodel: b\n" + Llm("hidden: 64, ffn_hidden: 128, heads: 4").substr(9), "m.yaml"); },
      {"m.yaml:2:", "model: duplicate key"});
  test::ExpectError(
      [] { ParseCluster("cluster: c\ngpu: h100\nnodes: 1\ngpus_per_node: 8\ngpu_mem_GiB: .inf\n", "c.yaml"); },
      {"gpu_mem_GiB", "must be a finite number"});
  const std::string c48 = "cluster: c\ngpu: h100\nnodes: 1\ngpus_per_node: 8\ngpu_mem_GiB: 48\n";
  EXPECT_DOUBLE_EQ(ParseCluster(c48, "c.yaml").mem_headroom_bytes, 0.025 * 48 * (1 << 30));  // the default
  EXPECT_DOUBLE_EQ(ParseCluster(c48 + "mem_headroom_GiB: 4\n", "c.yaml").usable_mem_bytes(), 44.0 * (1 << 30));
  EXPECT_DOUBLE_EQ(ParseCluster(c48 + "mem_headroom_GiB: 0\n", "c.yaml").usable_mem_bytes(), 48.0 * (1 << 30));
  test::ExpectError([&] { ParseCluster(c48 + "mem_headroom_GiB: 48\n", "c.yaml"); },
                    {"c.yaml:6:", "mem_headroom_GiB", "must be less than gpu_mem_GiB (48), got 48"});
  test::ExpectError([&] { ParseCluster(c48 + "mem_headroom_GiB: -1\n", "c.yaml"); }, {"c.yaml:6:", "mem_headroom_GiB"});
  test::Fixture f;
  nlohmann::json j = PlanToJson(test::DisaggregatedShape(f));
  EXPECT_NO_THROW(PlanFromJson(j, "p.json"));
  j["units"][1]["first_group"] = 1000000000000LL;
  test::ExpectError([&] { PlanFromJson(j, "p.json"); }, {"p.json", "first_group", "out of range"});
  j = PlanToJson(test::DisaggregatedShape(f));
  j["units"][0]["pipelines"][0]["replicas"] = int64_t{1} << 40;
  test::ExpectError([&] { PlanFromJson(j, "p.json"); }, {"replicas", "out of range"});
  // A negative tp is said to be one, not that it fails to divide the group.
  j = PlanToJson(test::DisaggregatedShape(f));
  j["units"][0]["tp"] = -8;
  test::ExpectError([&] { CompilePlan(f.model, f.cluster, f.workload, PlanFromJson(j, "p.json"), f.batch); },
                    {"unit encoder: tp (-8) and cp (1) must be >= 1"});
  test::ExpectError(
      [&] {
        PlanFromJson(nlohmann::json::array({1, 2}), "p_array.json");
      },
      {"p_array.json: the document: must be an object, got array"});
}

// The CLI's flags: what CLI11 lets through is checked, and writes that fail
// (a full disk) are errors, not reported as written. Directories given as
// files, and a workload's missing JSONL, are named as such.
TEST(Limits, CliFlagsAndFailedWritesExitTwo) {
  const std::string base = "plan --model llama3-1b --cluster h100:1x8 --iterations 1 ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--schedule-budget nan --strategy megatron", "--schedule-budget: must be > 0, got nan"},
      {"--workload text --global-batch 0 --strategy megatron", "--global-batch: 0 is out of range; valid: an integer"},
      {"--workload text --seed -1 --strategy megatron", "--seed: -1 is out of range; valid: an integer in 0.."},
      {"--workload text --seed 18446744073709551616 --strategy megatron",
       "--seed: '18446744073709551616' is not an integer in 0..9223372036854775807"},
      {"--json '' --strategy megatron", "--json: a file name is required"},
      {"--strategy ''", "--strategy: empty"},
      {"--strategy megatron,megatron", "megatron is named twice"},
      {"--tp 3 --strategy megatron", "no candidate matched --tp 3 with the global batch 512 on 8 GPUs"},
      {"--tp 2 --strategy fsdp",
       "fsdp: not applicable: searches its own parallel degrees and takes no --tp / --pp "
       "/ --dp pin"},
      // Strategies with the same reason share one line.
      {"--pp 2 --strategy mmscale,distmm", "mmscale, distmm: not applicable: searches its own parallel degrees"},
      {"--strategy megatron --json /dev/full", "--json /dev/full: writing failed: No space left on device"},
      // Found before the search (issue 43: an unwritable --json was found only after it).
      {"--strategy megatron --json /nonexistent/plans.json",
       "--json /nonexistent/plans.json: its folder /nonexistent does not exist"},
      {"--strategy megatron --report /tmp", "--report /tmp: is a folder; give a file name"},
      {"--strategy megatron --trace /dev/full", "/dev/full: writing failed: No space left on device"},
      {"--strategy megatron --report /dev/full", "--report /dev/full: writing failed: No space left on device"},
      {"--strategy megatron --workload " + test::WriteTemp("lim-missing.yaml",
                                                           "workload: w\nsource: {kind: jsonl, path: "
                                                           "/nonexistent/s.jsonl}\n"),
       "lim-missing.yaml: source.path: /nonexistent/s.jsonl: no such file; expected a JSONL sample file"},
  };
  // A pin a strategy cannot honour is said, not ignored (disttrain kept PP 1 under --pp 64).
  auto [pcode, pout] =
      test::RunLoom("plan --model vlm-s --cluster h100:1x8 --iterations 1 --strategy disttrain --pp 64");
  EXPECT_EQ(pcode, 2);
  EXPECT_NE(pout.find("TP x DP x PP splits that fit has the backbone at --pp 64"), std::string::npos) << pout;
  // Every sampled batch is kept for --json: then their number is bounded (1e9 reached 8 GB before
  // bad_alloc); without --json, --report or --run nothing grows with it (Comparison.WithoutKeptBatches...).
  auto [icode, iout] = test::RunLoom(
      "plan --model llama3-1b --cluster h100:1x8 --strategy megatron --iterations 1000000000 --json /tmp/lim-i.json");
  EXPECT_EQ(icode, 2);
  EXPECT_NE(iout.find("--iterations: at most 10000 sampled batches per strategy"), std::string::npos) << iout;
  auto [dcode, dout] = test::RunLoom("simulate --model llama3-1b --cluster h100:1x8 --plan /tmp");
  EXPECT_EQ(dcode, 2);
  EXPECT_NE(dout.find("/tmp: is a directory; expected a plan JSON file"), std::string::npos) << dout;
  auto [mcode, mout] = test::RunLoom("inspect /tmp");
  EXPECT_EQ(mcode, 2);
  EXPECT_NE(mout.find("/tmp: is a directory without config.json; expected a built-in model name, a model YAML file or a Hugging Face model folder"), std::string::npos)
      << mout;
  for (const auto& [args, message] : cases) {
    SCOPED_TRACE(args);
    auto [code, out] = test::RunLoom(base + args);
    EXPECT_EQ(code, 2) << out;
    EXPECT_NE(out.find(message), std::string::npos) << out;
  }
}

// docs/spec-format.md: consecutive layers agree on the width they pass, and a
// projector takes its input module's output width (times a patch merge).
TEST(Limits, InconsistentWidthsAreErrors) {
  const std::string head =
      "model: m\nmodules:\n  - name: llm\n    role: backbone\n    modality: text\n"
      "    tokens: {source: text}\n    layers:\n";
  test::ExpectError(
      [&] {
        ParseModel(head +
                       "      - {kind: embedding, vocab: 100, hidden: 512}\n"
                       "      - {kind: transformer, hidden: 1024, ffn_hidden: 128, heads: 4}\n",
                   "w.yaml");
      },
      {"w.yaml:9:", "layers[1].hidden", "transformer takes width 1024, but layers[0] hands on 512"});
  test::ExpectError(
      [&] {
        ParseModel(head +
                       "      - {kind: embedding, vocab: 100, hidden: 1024}\n"
                       "      - {kind: transformer, count: 2, hidden: 1024, ffn_hidden: 128, heads: 4}\n"
                       "      - {kind: lm_head, vocab: 100, hidden: 2048}\n",
                   "w.yaml");
      },
      {"layers[2].hidden", "lm_head takes width 2048, but layers[1] hands on 1024"});
  const std::string vlm =
      "model: v\nmodules:\n"
      "  - name: vision\n    role: encoder\n    modality: image\n"
      "    tokens: {source: image, patch_px: 14, merge: MERGE}\n    layers:\n"
      "      - {kind: patch_embed, patch_px: 14, hidden: 1024}\n"
      "      - {kind: transformer, hidden: 1024, ffn_hidden: 4096, heads: 16}\n"
      "  - name: projector\n    role: projector\n    modality: image\n    inputs: [vision]\n"
      "    tokens: {source: inputs}\n    layers:\n"
      "      - {kind: mlp_projector, in_dim: IN, hidden: 2048, out_dim: 2048}\n";
  auto with = [&](const std::string& merge, const std::string& in) {
    std::string y = vlm;
    y.replace(y.find("MERGE"), 5, merge);
    y.replace(y.find("IN"), 2, in);
    return y;
  };
  // A model with nothing to train is refused (it would be "planned" at a
  // forward-only MFU); a frozen component beside a trained one is fine.
  test::ExpectError(
      [] { ParseModel("model: f\nmodules:\n  - name: llm\n    from: llama3-1b\n    frozen: true\n", "f.yaml"); },
      {"f.yaml: model f: every layer is frozen", "nothing to train"});
  EXPECT_NO_THROW(LoadModel("mllm-sss"));  // frozen encoders and LLM, trained projectors
  // `from:` an empty file names the including file and line, and the empty one.
  const std::string empty = test::WriteTemp("lim-empty.yaml", "");
  test::ExpectError([&] { ParseModel("model: m\nmodules:\n  - name: v\n    from: " + empty + "\n", "f.yaml"); },
                    {"f.yaml:4:", "modules[0].from", "lim-empty.yaml: empty model spec"});
  EXPECT_NO_THROW(ParseModel(with("1", "1024"), "v.yaml"));
  EXPECT_NO_THROW(ParseModel(with("2", "4096"), "v.yaml"));  // 2x2 merged patches
  test::ExpectError([&] { ParseModel(with("1", "77"), "v.yaml"); },
                    {"module projector: its projector takes in_dim 77, but vision hands on 1024"});
  test::ExpectError([&] { ParseModel(with("2", "1024"), "v.yaml"); },
                    {"vision hands on 4096 (width 1024 x its 2x2 merge)"});
}

// A global batch far too small for the cluster: the best plan idles most of
// the time, and the output says so with a batch that fills its pipelines.
TEST(Limits, ASmallBatchForTheClusterIsWarnedAbout) {
  auto [code, out] = test::RunLoom(
      "plan --model llama3-8b --cluster h100:32x8 --workload text --global-batch 16 "
      "--strategy megatron --iterations 1");
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("warning: the best plan idles"), std::string::npos) << out;
  EXPECT_NE(out.find("a global batch of 16 is small for 256 GPUs; 256 (32 microbatches per replica for its 8 stages)"),
            std::string::npos)
      << out;
  auto [code2, out2] = test::RunLoom(
      "plan --model llama3-8b --cluster h100:32x8 --workload text --global-batch 512 "
      "--strategy megatron --iterations 1");
  EXPECT_EQ(code2, 0) << out2;
  EXPECT_EQ(out2.find("warning: the best plan idles"), std::string::npos) << out2;
}

// simulate's table: rows are replica 0's ranks, the metric the largest over
// every replica; when it exceeds every row the output says why.
TEST(Limits, PeakAboveEveryRowIsExplained) {
  test::Fixture f;
  PlanRun run = RunPlan(f.model, f.cluster, f.workload, test::MegatronShape(f), f.batch);
  ASSERT_GT(run.costs.replicas.size(), 1u);
  EXPECT_EQ(FormatPlanRun(run, f.model, f.workload, "x").find("distinct replicas (each trains"), std::string::npos);
  double rows = 0;
  for (double p : run.result.peak_mem_bytes) rows = std::max(rows, p);
  run.metrics.peak_mem_bytes = rows * 1.2;  // as when another replica's samples peak higher
  EXPECT_NE(FormatPlanRun(run, f.model, f.workload, "x").find("is the largest over all"), std::string::npos);
}

// What the fuzzers (fuzz/, `make fuzz`) found, each reduced to its input:
// yaml-cpp's conversions of a list or mapping where a name belongs, and a
// path too long for the system, escaped as other exceptions than loom::Error.
TEST(Limits, FuzzerFindingsAreLocatedErrors) {
  const std::string llm = Llm("hidden: 64, ffn_hidden: 128, heads: 4");
  test::ExpectError([&] { ParseModel(llm + "  - name: enc\n    from: llama3-1b\n    inputs: [text: x]\n", "m.yaml"); },
                    {"m.yaml:12:14:", "modules[1].inputs[0]: expected a name, got a mapping"});
  test::ExpectError(
      [&] { ParseModel(llm + "  - name: enc\n    from: llama3-1b\n    drop_kinds: [[lm_head]]\n", "m.yaml"); },
      {"m.yaml:12:18:", "modules[1].drop_kinds[0]: expected a name, got a list"});
  // An unknown kind lists the valid ones (second audit M096).
  test::ExpectError(
      [&] { ParseModel(llm + "  - name: enc\n    from: llama3-1b\n    drop_kinds: [lm_haed]\n", "m.yaml"); },
      {"drop_kinds: unknown layer kind 'lm_haed'; valid: ", "lm_head", "did you mean 'lm_head'?"});
  test::ExpectError([] { ParseCalibration("gpu: h100\n[a]: 1\npoints: []\n", "c.yaml"); },
                    {"c.yaml:2:", "a key must be a plain name, not a list"});
  test::ExpectError([] { ParseProfile("gpu: h100\napplies_to: [{h100: 1}]\n", "p.yaml"); },
                    {"p.yaml:2:", "applies_to[0]: expected a name, got a mapping"});
  const std::string long_name(5000, 'x');
  test::ExpectError([&] { LoadCluster(long_name); }, {"unknown cluster"});
  test::ExpectError([&] { LoadModel(long_name); }, {"xxxx"});
  test::ExpectError([&] { LoadWorkload(long_name); }, {"xxxx"});
}

}  // namespace
}  // namespace loom
