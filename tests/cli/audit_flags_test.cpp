// The CLI audit of 2026-11-28: values that were silently accepted, clamped,
// wrapped or ignored, or pasted into generated code, are each refused with
// exit 2 and a message naming the flag and what is valid.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include <string>
#include <utility>
#include <vector>

#include "test_util.h"

namespace loom {
namespace {

TEST(AuditedFlags, EachIsRefusedNamingTheFlagAndWhatIsValid) {
  const std::string data = std::string(LOOM_TEST_DATA) + "/runtime/";
  const std::string replay = "replay --model gpt3-medium --cluster a40:4x1 --hours 1 ";
  const std::string run = "run --model " + data +
                          "tiny-llm.yaml --cluster h100:1x1 --workload text --global-batch 2 "
                          "--seq-len 16 --steps 1 ";
  const std::string sim = "simulate --model " + data +
                          "tiny-llm.yaml --cluster h100:1x2 --workload text "
                          "--global-batch 8 ";
  const std::string trailing = test::WriteTemp("audit-trailing.txt", "100 fail 1 extra\n");
  const std::string negative = test::WriteTemp("audit-negative.txt", "-5 fail 1\n");
  const std::string cluster =
      test::WriteTemp("audit-cluster.yaml", "cluster: c\ngpu: h100\nnodes: 1\ngpus_per_node: 2\ngpu_mem_GiB: 1e30\n");
  // A head scoring fewer tokens than its embedding reads (Mllama's) and a label past it:
  // "Target 100 is out of bounds" inside the workers, without the line (Y-vocab).
  std::string narrow_head;
  {
    std::ifstream in(data + "tiny-llm.yaml");
    std::stringstream text;
    text << in.rdbuf();
    narrow_head = text.str();
    const std::string wide = "{kind: lm_head, vocab: 128";
    narrow_head.replace(narrow_head.find(wide), wide.size(), "{kind: lm_head, vocab: 64");
  }
  const std::string head_model = test::WriteTemp("audit-head.yaml", narrow_head);
  const std::string head_data = test::WriteTemp("audit-head.jsonl", "{\"input_ids\": [1, 2, 100, 101]}\n");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"run --model " + head_model + " --cluster h100:1x1 --data " + head_data + " --global-batch 1 --steps 1",
       "audit-head.jsonl:1: labels[2] is 100, past the LM head's vocabulary of 64"},
      // Generated Python: MODULE:FUNCTION only.
      {sim + "--pp 2 --dp 1 --microbatches 2 --export-pytorch-csv /tmp/audit.csv --export-torchtitan /tmp/audit.py "
             "--torchtitan-base 'a:b\")(); import os; (\"'",
       "--torchtitan-base 'a:b\")(); import os; (\"': expected MODULE:FUNCTION, a dotted Python module"},
      // Flags that act only beside another.
      {sim + "--strategy megatron", "--strategy picks a strategy's plan out of --plan FILE"},
      {sim + "--pytorch-csv-comms", "--pytorch-csv-comms shapes --export-pytorch-csv's file"},
      {sim + "--torchtitan-base a:b", "--torchtitan-base names --export-torchtitan's base"},
      {replay + "--failures " + trailing + " --mtbf 5", "--mtbf: shapes a generated trace; --failures"},
      {run + "--keep-checkpoints 3", "--keep-checkpoints: acts on --checkpoint-dir's checkpoints"},
      {run + "--save /tmp/loom_tests/audit-save --checkpoint-dir /tmp/loom_tests/audit-save/ck",
       "--checkpoint-dir /tmp/loom_tests/audit-save/ck and --save /tmp/loom_tests/audit-save: one holds the other"},
      // Numbers: neither clamped, wrapped nor infinite.
      {replay + "--trace-seed -1", "--trace-seed: -1 is out of range"},
      {replay + "--min-nodes 0", "--min-nodes: 0 is out of range; valid: an integer in 1.."},
      {replay + "--min-nodes 100", "--min-nodes 100: the cluster has 4 nodes; valid: 1..4"},
      {replay + "--systems ''", "--systems: empty; valid: one or more of oobleck, varuna, bamboo"},
      {replay + "--systems oobleck,oobleck", "--systems: oobleck is named twice"},
      {replay + "--checkpoint-save-s inf",
       "--checkpoint-save-s: inf is out of range; valid: a number from 0 to 3.6e+08"},
      {replay + "--restart-s nan", "--restart-s: nan is out of range; valid: a number from 0 to 3.6e+08"},
      {replay + "--oobleck-recover-s 1e400",
       "--oobleck-recover-s: 1e400 is out of range; valid: a number from 0 to 3.6e+08"},
      {run + "--nnodes 0", "--nnodes: 0 is out of range; valid: an integer in 1..65536"},
      {run + "--node-rank -1", "--node-rank: -1 is out of range"},
      {run + "--lr 1e300", "--lr: 1e300 is out of range; valid: a number > 0 and <= 1e+38"},
      {run + "--fault-tolerance 0 --kill 5:0:0", "--kill 5:0:0: the run has 1 processes; valid: a process in 0..0"},
      {run + "--fault-tolerance 0 --hang 0:5:0", "--hang 0:5:0: valid:"},
      {"profile --model " + data + "tiny-llm.yaml --repeats 1 --tokens 99999999999",
       "--tokens: 99999999999 is out of range; valid: token counts in 1..65536"},
      {"profile --model " + data + "tiny-llm.yaml --repeats 1 --concurrent 1000", "--concurrent: 1000 is out of range"},
      // Audit A5-13: video clips for a model without a video encoder were priced as text alone.
      {"plan --model vlm-s --cluster h800:1x8 --workload video --iterations 1",
       "workload video: sample 0 carries video clips, which no module of model vlm-s reads (it reads text, images)"},
      // Audit A5-09: green contexts asked for on a CPU were left out in silence.
      {"profile --model " + data + "tiny-llm.yaml --repeats 1 --sm-scaling on",
       "--sm-scaling on: green contexts partition a GPU's SMs; valid with --device cuda"},
      {"simulate --model " + data + "tiny-llm.yaml --cluster " + cluster + " --workload text --global-batch 8",
       "gpu_mem_GiB: 1e+30 GiB; valid: a GPU's memory, at most 1048576 GiB"},
      // Names: the command, the cost model, the --data file.
      {"plann --model x", "unknown command 'plann'; valid: models, prepare, run"},
      {sim + "--profile rooflin",
       "--profile rooflin: neither a built-in cost model nor a file; valid: default, "
       "roofline, or a profile YAML"},
      {"run --model " + data + "tiny-llm.yaml --cluster h100:1x1 --steps 1 --data /nonexistent/d.jsonl",
       "--data /nonexistent/d.jsonl: no such file; expected a JSONL file of samples"},
      {"plan --config " + test::WriteTemp("audit-nested.yaml", "config: other.yaml\n"),
       "config: config files do not nest"},
      // Integer flags: the range, not CLI11's bare "Could not convert" (checked before conversion).
      {run + "--steps 99999999999", "--steps: 99999999999 is out of range; valid: an integer in 1..2147483647"},
      {"plan --model vlm-s --cluster h800:2x8 --iterations abc",
       "--iterations: 'abc' is not an integer in 1..2147483647"},
      {run + "--warmup-steps 1.5", "--warmup-steps: '1.5' is not an integer in 0..2147483647"},
      // --config: a value CLI11 refuses is said at the file's line; a key given twice is named (D47, D61).
      {"plan --config " +
           test::WriteTemp("audit-cfg-value.yaml", "model: vlm-s\ncluster: h800:2x8\nglobal-batch: eight\n"),
       "audit-cfg-value.yaml:3:1: --global-batch: 'eight' is not an integer in 1..16777216"},
      {"plan --config " + test::WriteTemp("audit-cfg-twice.yaml", "model: vlm-s\ncluster: h800:2x8\nmodel: vlm-m\n"),
       "audit-cfg-twice.yaml:3:1: model: given twice (first at "},
      // plan: flags no named strategy reads (D49).
      {"plan --model vlm-s --cluster h800:2x8 --run-steps 3", "--run-steps: steps of --run's runs; add --run"},
      {"plan --model vlm-s --cluster h800:2x8 --strategy megatron --schedule-rollouts 5",
       "--schedule-rollouts: only pipeweaver's strategies read it"},
      {"plan --model vlm-s --cluster h800:2x8 --strategy mmscale --sub-microbatch 2",
       "--sub-microbatch: only pipeweaver's strategies read it"},
      {"plan --model vlm-s --cluster h800:2x8 --strategy megatron --fault-tolerance 1",
       "--fault-tolerance: only oobleck reads it"},
      {"plan --model vlm-s --cluster h800:2x8 --strategy pipeweaver --sub-microbatch 1000000",
       "--sub-microbatch 1000000: a whole batch holds at most 2196 sequences of one encoder; valid: 1..2196"},
      // inspect: an image for a text model, an image beside a workload, an empty cluster (D56-D58).
      {"inspect llama3-1b --image 640x480", "--image 640x480: model llama3-1b has no module that reads images"},
      {"inspect vlm-s --image 640x480 --workload obelics", "give --image or the workload flags, not both"},
      {"inspect vlm-s --cluster ''", "unknown cluster ''"},
      // The hidden fault injection: a rank or step that never runs (D60).
      {run + "--kill-rank 7 --kill-step 0", "--kill-rank 7 --kill-step 0: the run has 1 ranks and 1 steps"},
      {run + "--kill-rank 0",
       "--kill-rank 0 --kill-step -1: the run has 1 ranks and 1 steps; valid: a rank in 0..0 "
       "and a step in 0..1"},
      // A trace line: nothing after the node; times from 0.
      {replay + "--failures " + trailing, "audit-trailing.txt:1: 'extra' after the node"},
      {replay + "--failures " + negative,
       "audit-negative.txt:1: time '-5'; valid: seconds from the start of training, 0 to 3.6e+08"},
  };
  for (const auto& [args, expected] : cases) {
    SCOPED_TRACE(args);
    auto [rc, out] = test::RunLoom(args);
    EXPECT_EQ(rc, 2) << out;
    EXPECT_NE(out.find(expected), std::string::npos) << out;
  }
}

// A plan file's recorded batches: each iteration once, none negative; a layer
// range naming a module outside its unit is said so (it read "6 layers, must
// hold the 6 layers").
TEST(AuditedFlags, PlanFilesNameTheirBadBatchesAndModules) {
  const std::string plan = test::WriteTemp("audit-plan.json", "");
  auto [code, out] = test::RunLoom("plan --model " + std::string(LOOM_TEST_DATA) +
                                   "/runtime/tiny-llm.yaml --cluster h100:1x2 --workload text --global-batch 8 "
                                   "--strategy megatron --iterations 2 --json " +
                                   plan);
  ASSERT_EQ(code, 0) << out;
  std::stringstream text;
  text << std::ifstream(plan).rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str());
  auto mutated = [&](const std::string& name, auto&& change) {
    nlohmann::json m = j;
    change(m["strategies"][0]);
    return test::WriteTemp(name, m.dump());
  };
  std::vector<std::pair<std::string, std::string>> cases = {
      {mutated("audit-neg.json", [](nlohmann::json& s) { s["batches"][0]["iteration"] = -1; }),
       "strategies[0].batches[0].iteration: -1; valid: an iteration >= 0"},
      {mutated("audit-dup.json", [](nlohmann::json& s) { s["batches"][1]["iteration"] = 0; }),
       "strategies[0].batches[1].iteration: iteration 0 is recorded twice"},
      {mutated("audit-mod.json",
               [](nlohmann::json& s) {
                 s["plan"]["units"][0]["pipelines"][0]["stages"][0]["layers"][0]["module"] = "llmx";
               }),
       "a layer range names module llmx, which is not one of the unit's (llm)"},
  };
  // The recorded problem is the file's: its errors name it.
  nlohmann::json bad_batch = j, bad_cluster = j;
  bad_batch["problem"]["global_batch"] = -5;
  bad_cluster["problem"]["cluster"] = "h100:0x2";
  cases.push_back({test::WriteTemp("audit-gb.json", bad_batch.dump()),
                   "audit-gb.json: problem.global_batch: -5; valid: 1..16777216"});
  cases.push_back({test::WriteTemp("audit-cl.json", bad_cluster.dump()), "audit-cl.json: its recorded problem (model"});
  for (const auto& [file, expected] : cases) {
    SCOPED_TRACE(file);
    auto [rc, msg] = test::RunLoom("simulate --plan " + file);
    EXPECT_EQ(rc, 2) << msg;
    EXPECT_NE(msg.find(expected), std::string::npos) << msg;
  }
}

// D37: `run --plan FILE` with --model and --cluster ran the workload's default
// batch (128) and refused the plan, made for 8; the flags not given now come
// from the file's recorded problem, as in `simulate --plan`. A flag given
// still wins, and the plan is checked against it.
TEST(AuditedFlags, RunAndSimulateTakeThePlanFilesRecordedBatch) {
  const std::string model = std::string(LOOM_TEST_DATA) + "/runtime/tiny-llm.yaml";
  const std::string plan = test::WriteTemp("audit-recorded.json", "");
  auto [code, out] = test::RunLoom("plan --model " + model +
                                   " --cluster h100:1x2 --workload text --global-batch 8 --seq-len 16 "
                                   "--strategy megatron --json " +
                                   plan);
  ASSERT_EQ(code, 0) << out;
  const std::string given = " --model " + model + " --cluster h100:1x2 --plan " + plan;
  auto [sim_rc, sim_out] = test::RunLoom("simulate" + given);
  EXPECT_EQ(sim_rc, 0) << sim_out;
  auto [run_rc, run_out] = test::RunLoom("run" + given + " --steps 1 --json");
  ASSERT_EQ(run_rc, 0) << run_out;
  EXPECT_NE(run_out.find("\"losses\""), std::string::npos) << run_out;
  auto [bad_rc, bad_out] = test::RunLoom("run" + given + " --steps 1 --global-batch 4");
  EXPECT_EQ(bad_rc, 2) << bad_out;
  EXPECT_NE(bad_out.find("global_batch is 8; the workload's is 4"), std::string::npos) << bad_out;
}

}  // namespace
}  // namespace loom
