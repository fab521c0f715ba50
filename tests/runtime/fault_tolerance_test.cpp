// `loom run --fault-tolerance F` (issue 17, Oobleck §2.5 on the runtime):
// workers killed with SIGKILL mid-step, or stopped so that only their missing
// heartbeats give them away, are replaced by re-instantiating Oobleck's
// pipeline templates on the nodes left; layers a pipeline lost come from a
// surviving replica with their AdamW state; the interrupted step is replayed
// once. Every run below must end with the parameters of plain training in one
// process on the same samples (tests/runtime/reference.h): a layer left at
// its initial values, a step lost or run twice, or an optimizer state not
// carried over would each move them. Beyond f failures the run stops with
// the "cannot recover" outcome after its survivors save a training
// checkpoint (weights/run_checkpoint.h, the format every run writes), which
// `--resume` continues from; a node that comes back is used again.
#include <gtest/gtest.h>

#include <torch/torch.h>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "loom/error.h"
#include "loom/runtime/fault_tolerance.h"
#include "loom/weights/run_checkpoint.h"
#include "loom/weights/safetensors.h"
#include "reference.h"

namespace loom {
namespace {

using namespace runtime_test;

// Oobleck's plan of the tiny VLM for f on `cluster` (a `loom plan --json`
// file, named after the test: tests running at once must not share it).
std::string OobleckPlan(const TinyRun& s, const std::string& cluster, int f) {
  const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  const std::string path = test::WriteTemp(fmt::format("ft-{}-{}-f{}.json", name, cluster.substr(5), f), "");
  auto [code, out] =
      LoomCli(fmt::format("plan --model {} --cluster {} {} --precision fp32 --strategy oobleck "
                          "--fault-tolerance {} --iterations 1 --json {}",
                          s.model_path, cluster, s.data_args, f, path));
  EXPECT_EQ(code, 0) << out;
  return path;
}

// An empty checkpoint directory of its own (nothing left from an earlier run).
std::string FreshDirectory(const std::string& name) {
  const std::string dir = test::WriteTemp(name + "-marker", "") + ".d";
  std::filesystem::remove_all(dir);
  return dir;
}

std::string RunArgs(const TinyRun& s, const std::string& cluster, const std::string& plan, int f) {
  return fmt::format("run --model {} --cluster {} {} --plan {} --fault-tolerance {}", s.model_path, cluster,
                     s.data_args, plan, f);
}

// A run of `plan` (f = 1) on three nodes that loses two, node 1 in step 1 and
// node 0 in step 2, so it stops with its state after 2 steps written to a
// fresh checkpoint directory named `name`, which is returned.
std::string StoppedRunCheckpoint(const TinyRun& s, const std::string& plan, const std::string& name) {
  const std::string dir = FreshDirectory(name);
  auto [code, out] = LoomCli(RunArgs(s, "h100:3x1", plan, 1) + " --kill 1:1:3 --kill 0:2:4 --checkpoint-dir " + dir +
                             " --steps 3 --timeout 20");
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("cannot recover: 1 nodes left, need 2"), std::string::npos) << out;
  return dir;
}

TEST(FaultTolerance, KilledWorkersAreReplacedAndTrainingEqualsOneProcess) {
  const TinyRun s(kVlm, kLaion);
  const Reference ref = TrainInOneProcess(s);
  // Three one-GPU nodes, f = 1: a 2-node pipeline (nodes 0, 1) and a 1-node
  // one (node 2). Node 1 dies in step 1 after 3 of its actions: its pipeline
  // shrinks to the 1-node template on node 0, which then holds the LLM layers
  // node 1 had and receives them from node 2.
  const std::string three = OobleckPlan(s, "h100:3x1", 1);
  nlohmann::json j;
  ExpectRunMatches(ref, RunArgs(s, "h100:3x1", three, 1) + " --kill 1:1:3", &j);
  ASSERT_EQ(j["events"].size(), 1u) << j.dump();
  const auto& e = j["events"][0];
  EXPECT_EQ(e["kind"], "failure");
  EXPECT_EQ(e["step"], 1);  // the interrupted step, replayed
  EXPECT_EQ(e["nodes"], nlohmann::json::array({1}));
  EXPECT_EQ(e["processes"], 2);
  EXPECT_GT(e["copied_bytes"].get<double>(), 0);  // llm 2..6 with their AdamW moments
  EXPECT_GE(e["detect_s"].get<double>(), 0);
  EXPECT_LT(e["detect_s"].get<double>(), 3.0);  // the closed pipe, well before any heartbeat timeout
  EXPECT_GT(e["recover_s"].get<double>(), 0);
  EXPECT_GE(e["lost_s"].get<double>(), e["recover_s"].get<double>());
  // Node 2 dies after all of step 1, its optimizer step included, before the
  // step commits: the survivors finished the step too and roll back to the
  // state it began with (keeping theirs would apply step 1 twice).
  ExpectRunMatches(ref, RunArgs(s, "h100:3x1", three, 1) + " --kill 2:1:9999", &j);
  ASSERT_EQ(j["events"].size(), 1u) << j.dump();
  EXPECT_EQ(j["events"][0]["step"], 1);
  // Four nodes, two kills in two steps: 4 -> 3 -> 2 one-node pipelines; the
  // batch of 8 microbatches splits 3/3/2 over three of them.
  const std::string four = OobleckPlan(s, "h100:4x1", 1);
  ExpectRunMatches(ref, RunArgs(s, "h100:4x1", four, 1) + " --kill 1:1:3 --kill 3:2:5", &j);
  ASSERT_EQ(j["events"].size(), 2u) << j.dump();
  EXPECT_EQ(j["events"][0]["step"], 1);
  EXPECT_EQ(j["events"][0]["processes"], 3);
  EXPECT_NE(j["events"][0]["outcome"].get<std::string>().find("3/3/2"), std::string::npos) << j.dump();
  EXPECT_EQ(j["events"][1]["step"], 2);
  EXPECT_EQ(j["events"][1]["processes"], 2);
}

TEST(FaultTolerance, AWorkerThatHangsIsFoundByItsMissingHeartbeats) {
  const TinyRun s(kVlm, kLaion);
  const Reference ref = TrainInOneProcess(s);
  // SIGSTOP: the process lives, its pipe stays open, it only stops talking.
  nlohmann::json j;
  ExpectRunMatches(
      ref, RunArgs(s, "h100:3x1", OobleckPlan(s, "h100:3x1", 1), 1) + " --hang 2:1:2 --heartbeat-timeout 1", &j);
  ASSERT_EQ(j["events"].size(), 1u) << j.dump();
  EXPECT_EQ(j["events"][0]["nodes"], nlohmann::json::array({2}));
  const double detect_s = j["events"][0]["detect_s"].get<double>();
  EXPECT_GT(detect_s, 0.8);  // the timeout, less one heartbeat period
  EXPECT_LT(detect_s, 3.0);
}

TEST(FaultTolerance, MoreFailuresThanToleratedStopWithACheckpointThatResumes) {
  const TinyRun s(kVlm, kLaion);
  const Reference ref = TrainInOneProcess(s);
  const std::string dir = FreshDirectory("ft-checkpoint"), plan = OobleckPlan(s, "h100:3x1", 1);
  // Node 1 dies in step 1 (two 1-node pipelines remain on nodes 0 and 2),
  // node 0 in step 2: one node left, f + 1 = 2 pipelines of a node needed.
  auto [code, out] = LoomCli(RunArgs(s, "h100:3x1", plan, 1) + " --kill 1:1:3 --kill 0:2:4 --checkpoint-dir " + dir +
                             " --steps 3 --timeout 20");
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("cannot recover: 1 nodes left, need 2"), std::string::npos) << out;
  EXPECT_NE(out.find("--resume " + dir), std::string::npos) << out;
  std::ifstream manifest(dir + "/" + weights::StepFolderName(2) + "/checkpoint.json");
  ASSERT_TRUE(manifest) << out;
  const nlohmann::json m = nlohmann::json::parse(manifest);
  EXPECT_EQ(m["format"], "loom-checkpoint-2");
  EXPECT_EQ(m["steps_done"], 2);  // step 2 was interrupted: the state is the one after steps 0 and 1
  // The machine is whole again: the run goes on from the checkpoint on all three nodes.
  auto [code2, out2] = LoomCli(RunArgs(s, "h100:3x1", plan, 1) + " --resume " + dir + " --steps 3 --timeout 20 --json");
  ASSERT_EQ(code2, 0) << out2;
  const auto j = nlohmann::json::parse(out2);
  EXPECT_EQ(j["first_step"], 2);
  EXPECT_TRUE(j["losses"][0].is_null());  // not run here
  ExpectClose(j["losses"][2].get<double>(), ref.losses[2], "loss of the resumed step");
  ExpectParamsMatch(ref, j);
  // The format is every run's: a run that is not fault-tolerant, under
  // another plan (PP 2 on two GPUs), goes on from it too.
  const Cluster two = MakeCluster("h100", 1, 2);
  auto [code4, out4] = LoomCli("run --model " + s.model_path + " --cluster h100:1x2 " + s.data_args + " --plan " +
                               MegatronPlanFile(s, ScheduleKind::kOneFOneB, 1, "ft-resume-pp2.json", 1, 2, 1, &two) +
                               " --resume " + dir + " --steps 3 --timeout 20 --json");
  ASSERT_EQ(code4, 0) << out4;
  ExpectParamsMatch(ref, nlohmann::json::parse(out4));
  // A checkpoint of another model is refused, naming it.
  auto [code3, out3] = LoomCli("run --model " + kModel + " --cluster h100:1x1 " + kData +
                               " --fault-tolerance 0 --resume " + dir + " --steps 3");
  EXPECT_EQ(code3, 2) << out3;
  EXPECT_NE(out3.find("a checkpoint of model 'tiny-vlm'"), std::string::npos) << out3;
}

TEST(FaultTolerance, LosingEveryHolderOfALayerResumesFromThePeriodicCheckpoint) {
  const TinyRun s(kVlm, kLaion);
  const Reference ref = TrainInOneProcess(s);
  const std::string dir = FreshDirectory("ft-periodic"), plan = OobleckPlan(s, "h100:3x1", 1);
  // Nodes 1 and 2 die together as step 2 starts: node 0 is left with only
  // its stage's layers, and LLM layers 2..5 are gone. A checkpoint was
  // completed after every step, the last one after step 1 (step-2).
  auto [code, out] = LoomCli(RunArgs(s, "h100:3x1", plan, 1) + " --kill 1:2:0 --kill 2:2:0 --checkpoint-every 1 " +
                             "--checkpoint-dir " + dir + " --keep-checkpoints 0 --steps 3 --timeout 20");
  EXPECT_EQ(code, 2) << out;
  const std::string step2 = dir + "/" + weights::StepFolderName(2);
  EXPECT_NE(out.find("the state after 2 step(s) is saved in " + step2), std::string::npos) << out;
  EXPECT_TRUE(std::filesystem::exists(dir + "/" + weights::StepFolderName(1) + "/checkpoint.json")) << out;
  auto [code2, out2] =
      LoomCli(RunArgs(s, "h100:3x1", plan, 1) + " --resume " + step2 + " --steps 3 --timeout 20 --json");
  ASSERT_EQ(code2, 0) << out2;
  const auto j = nlohmann::json::parse(out2);
  EXPECT_EQ(j["first_step"], 2);
  ExpectParamsMatch(ref, j);
}

TEST(FaultTolerance, ANodeThatRejoinsIsUsedAgain) {
  const TinyRun s(kVlm, kLaion);
  const Reference ref = TrainInOneProcess(s);
  // Node 2 (the 1-node pipeline) dies in step 0: nodes 0 and 1 re-instantiate
  // as two 1-node pipelines (f + 1 = 2 are needed); node 2 comes back before
  // step 2 and joins the first of them as a 2-node pipeline, its fresh
  // worker receiving its layers from the survivors.
  nlohmann::json j;
  ExpectRunMatches(ref, RunArgs(s, "h100:3x1", OobleckPlan(s, "h100:3x1", 1), 1) + " --kill 2:0:2 --rejoin 2:2", &j);
  ASSERT_EQ(j["events"].size(), 2u) << j.dump();
  EXPECT_EQ(j["events"][0]["kind"], "failure");
  EXPECT_EQ(j["events"][0]["processes"], 2);
  EXPECT_EQ(j["events"][1]["kind"], "join");
  EXPECT_EQ(j["events"][1]["step"], 2);
  EXPECT_EQ(j["events"][1]["processes"], 3);
  EXPECT_GT(j["events"][1]["copied_bytes"].get<double>(), 0);
  EXPECT_EQ(j["step_s"].size(), 4u);  // three workers as launched and the one that joined
}

// Plans whose processes hold slices or shards (TP, ZeRO, CP), tied heads,
// fp16's loss scale and strategies that schedule every batch used to be
// refused: survivors cannot hand such state over whole. The run now re-plans
// with the plan's own strategy on the nodes left (or Oobleck's templates)
// and every worker restores the last checkpoint, or the initial state; the
// steps since are run again and must end where training in one process does.
TEST(FaultTolerance, PlansWithoutWholeLayersRecoverByRestoringTheLastCheckpoint) {
  const TinyRun s;
  const Reference ref = TrainInOneProcess(s);
  const Cluster four = MakeCluster("h100", 2, 2);
  const std::string base = "run --model " + s.model_path + " --cluster h100:2x2 " + s.data_args + " --plan ";
  // TP 2 x DP 2, ZeRO-1: node 1 dies in step 1, before any checkpoint. The
  // run goes back to its start on node 0 under Megatron's plan for 2 GPUs.
  nlohmann::json j;
  ExpectRunMatches(ref,
                   base + MegatronPlanFile(s, ScheduleKind::kOneFOneB, 1, "ft-tp2.json", 2, 1, 2, &four) +
                       " --fault-tolerance 1 --kill 2:1:3",
                   &j);
  ASSERT_EQ(j["events"].size(), 1u) << j.dump();
  EXPECT_EQ(j["events"][0]["restored_from"], "the start");
  EXPECT_EQ(j["events"][0]["replayed_steps"], 1);
  EXPECT_EQ(j["events"][0]["step"], 0);
  // CP 2 x DP 2 with ZeRO-3 and a checkpoint after every step: node 1 dies
  // in step 2, which restarts from the checkpoint of step 2.
  const std::string dir = FreshDirectory("ft-cp2");
  ExpectRunMatches(
      ref,
      base + MegatronPlanFile(s, ScheduleKind::kOneFOneB, 1, "ft-cp2.json", 1, 1, 2, &four, Recompute::kNone, 3, 2) +
          " --fault-tolerance 1 --kill 2:2:3 --checkpoint-dir " + dir + " --checkpoint-every 1",
      &j);
  ASSERT_EQ(j["events"].size(), 1u) << j.dump();
  EXPECT_EQ(j["events"][0]["restored_from"], dir + "/" + weights::StepFolderName(2));
  EXPECT_EQ(j["events"][0]["replayed_steps"], 0);
  EXPECT_TRUE(std::filesystem::exists(dir + "/" + weights::StepFolderName(3) + "/checkpoint.json"));
}

TEST(FaultTolerance, PerBatchStrategiesAndTiedHeadsRunFaultTolerantly) {
  const TinyRun vlm(kVlm, kLaion);
  // MMScale schedules every batch; its plan on 2 x 2 GPUs loses node 1 in
  // step 1 and goes on under MMScale's plan for the node left.
  const std::string plans = test::WriteTemp("ft-mmscale.json", "");
  auto [code, out] = LoomCli("plan --model " + kVlm + " --cluster h100:2x2 " + vlm.data_args +
                             " --precision fp32 --strategy mmscale --iterations 1 --json " + plans);
  ASSERT_EQ(code, 0) << out;
  nlohmann::json j;
  ExpectRunMatches(TrainInOneProcess(vlm),
                   "run --model " + kVlm + " --cluster h100:2x2 " + vlm.data_args + " --plan " + plans +
                       " --fault-tolerance 1 --kill 2:1:3",
                   &j);
  ASSERT_EQ(j["events"].size(), 1u) << j.dump();
  EXPECT_NE(j["events"][0]["outcome"].get<std::string>().find("re-planned by mmscale on 1 node(s)"), std::string::npos)
      << j.dump();
  // tiny-vlm2 ties its LM head: Oobleck's plan loses node 1 in step 1 (back
  // to the start), and the node rejoins before step 2, which waits for the
  // state of step 2 to be saved and restores it: no step is run again.
  const TinyRun tied(kVlm2, kLaion);
  ExpectRunMatches(TrainInOneProcess(tied),
                   RunArgs(tied, "h100:3x1", OobleckPlan(tied, "h100:3x1", 1), 1) + " --kill 1:1:3 --rejoin 1:2", &j);
  ASSERT_EQ(j["events"].size(), 2u) << j.dump();
  EXPECT_EQ(j["events"][0]["restored_from"], "the start");
  EXPECT_EQ(j["events"][1]["kind"], "join");
  EXPECT_EQ(j["events"][1]["step"], 2);
  EXPECT_NE(j["events"][1]["restored_from"].get<std::string>().find(weights::StepFolderName(2)), std::string::npos)
      << j.dump();
  EXPECT_EQ(j["events"][1]["replayed_steps"], 0);
}

TEST(FaultTolerance, BadRequestsAreErrorsNamingWhatIsValid) {
  const TinyRun s(kVlm, kLaion);
  const std::string plan = OobleckPlan(s, "h100:3x1", 1);
  const std::string base = "run --model " + s.model_path + " --cluster h100:3x1 " + s.data_args + " --plan " + plan;
  struct Bad {
    std::string args, says;
  };
  const Cluster two = MakeCluster("h100", 1, 2);
  const std::string megatron = MegatronPlanFile(s, ScheduleKind::kOneFOneB, 1, "ft-megatron.json", 1, 2, 1, &two);
  for (const Bad& b : std::vector<Bad>{
           {base + " --kill 1:1:3", "add --fault-tolerance F"},
           {base + " --fault-tolerance 1 --kill 1:x", "valid: PROCESS:STEP:ACTIONS"},
           {base + " --fault-tolerance 1 --kill 1:7:0", "a step in 0..2"},
           {base + " --fault-tolerance 1 --rejoin 9:1", "a node in 0..2"},
           {base + " --fault-tolerance 1 --resume /nonexistent/ckpt", "--resume /nonexistent/ckpt: no such folder"},
           {"run --model " + s.model_path + " --cluster h100:1x2 " + s.data_args + " --plan " + megatron +
                " --fault-tolerance 0 --device cuda",
            "--fault-tolerance: runs on --device cpu yet"},
       }) {
    auto [code, out] = LoomCli(b.args + " --steps 3");
    EXPECT_EQ(code, 2) << b.args << "\n" << out;
    EXPECT_NE(out.find(b.says), std::string::npos) << b.args << "\n" << out;
  }
}

// Issue 45: a reused checkpoint folder mixed two runs. Run A stops with a full
// checkpoint in DIR; run B in the same DIR is refused before it starts, and
// A's checkpoint stays as it was. Run B in a fresh folder loses every holder
// of LLM layers 2..5 with no periodic checkpoint: it fails naming the lost
// layers and leaves no partial checkpoint behind.
TEST(FaultTolerance, AReusedCheckpointFolderNeverMixesTwoRuns) {
  const TinyRun s(kVlm, kLaion);
  const std::string plan = OobleckPlan(s, "h100:3x1", 1), dir = StoppedRunCheckpoint(s, plan, "ft-reused");
  const auto manifest = [&] {
    std::ifstream f(weights::FindCheckpoint(dir) + "/checkpoint.json");
    return f ? nlohmann::json::parse(f) : nlohmann::json();
  };
  const nlohmann::json a = manifest();
  ASSERT_EQ(a["steps_done"], 2);
  auto [code2, out2] = LoomCli(RunArgs(s, "h100:3x1", plan, 1) + " --kill 1:1:0 --kill 2:1:0 --checkpoint-dir " + dir +
                               " --steps 3 --timeout 20");
  EXPECT_EQ(code2, 2) << out2;
  EXPECT_NE(out2.find(dir), std::string::npos) << out2;
  EXPECT_NE(out2.find("another run"), std::string::npos) << out2;
  EXPECT_EQ(manifest(), a) << "run B rewrote run A's manifest:\n" << out2;
  const std::string fresh = FreshDirectory("ft-reused-b");
  auto [code3, out3] = LoomCli(RunArgs(s, "h100:3x1", plan, 1) + " --kill 1:1:0 --kill 2:1:0 --checkpoint-dir " +
                               fresh + " --steps 3 --timeout 20");
  EXPECT_EQ(code3, 2) << out3;
  EXPECT_NE(out3.find("no survivor holds layer(s) llm_2, llm_3, llm_4, llm_5"), std::string::npos) << out3;
  EXPECT_NE(out3.find("no complete checkpoint was taken"), std::string::npos) << out3;
  if (std::filesystem::exists(fresh)) {
    for (const auto& e : std::filesystem::directory_iterator(fresh)) {
      // metrics.jsonl is the run's step record, kept beside its checkpoints by design.
      if (e.path().filename() != "metrics.jsonl") ADD_FAILURE() << "left behind: " << e.path();
    }
  }
}

// Issue 45: `--lr 1e30` made the loss NaN, the launcher read it as 0 and the
// run exited 0. A fault-tolerant run that diverges stops at once, naming the step.
TEST(FaultTolerance, ADivergedRunFailsNamingTheStep) {
  const TinyRun s(kVlm, kLaion);
  auto [code, out] =
      LoomCli(RunArgs(s, "h100:3x1", OobleckPlan(s, "h100:3x1", 1), 1) + " --lr 1e30 --steps 3 --timeout 20");
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("training diverged at step 1: the loss is nan"), std::string::npos) << out;
  EXPECT_EQ(out.find("loss 0.000000"), std::string::npos) << out;
}

// Issue 45: a checkpoint whose weights are not finite (a diverged run's) is
// refused on --resume, naming the file, instead of training on NaN with exit 0.
TEST(FaultTolerance, ACheckpointWithNonFiniteWeightsIsRefused) {
  const TinyRun s(kVlm, kLaion);
  const std::string plan = OobleckPlan(s, "h100:3x1", 1), dir = StoppedRunCheckpoint(s, plan, "ft-nan");
  // One weight of llm_0 becomes NaN in every part that holds it, the rest as saved.
  const std::string folder = weights::FindCheckpoint(dir);
  std::vector<std::string> parts;
  for (const auto& e : std::filesystem::directory_iterator(folder)) {
    if (e.path().extension() == ".safetensors") parts.push_back(e.path().string());
  }
  std::sort(parts.begin(), parts.end());
  std::string file, tensor;
  for (const std::string& path : parts) {
    const weights::SafetensorsFile part(path);
    for (const auto& t : part.layout().tensors) {
      if (tensor.empty() && t.name.rfind("llm_0.", 0) == 0 && t.name.find('#') == std::string::npos) tensor = t.name;
    }
    const weights::TensorInfo* t = tensor.empty() ? nullptr : part.Find(tensor);
    if (t == nullptr) continue;
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(part.layout().data_offset_bytes + t->begin_byte));
    const float nan = std::nanf("");
    f.write(reinterpret_cast<const char*>(&nan), sizeof(nan));
    ASSERT_TRUE(f) << path;
    if (file.empty()) file = path;
  }
  ASSERT_FALSE(file.empty()) << "no part holds a tensor of llm_0";
  auto [code2, out2] = LoomCli(RunArgs(s, "h100:3x1", plan, 1) + " --resume " + dir + " --steps 3 --timeout 20");
  EXPECT_EQ(code2, 2) << out2;
  EXPECT_NE(out2.find(file + ": tensor '" + tensor + "'"), std::string::npos) << out2;
  EXPECT_NE(out2.find("not finite"), std::string::npos) << out2;
}

TEST(FaultTolerance, ControlCommandsRoundTrip) {
  using runtime::ControlCommand;
  // A generation that restores a checkpoint (or the initial state), paths with spaces.
  ControlCommand restore{ControlCommand::Kind::kGeneration, 2, 3, 1, 5, 5, "/data/run 2/g3.json"};
  restore.restore = true;
  restore.restore_from = "/data/run 2/ckpt/step-00000002";
  ControlCommand from_start = restore;
  from_start.restore_from = "";
  for (const ControlCommand& c : {ControlCommand{ControlCommand::Kind::kGo, 4}, restore, from_start,
                                  ControlCommand{ControlCommand::Kind::kGo, 4, 0, 0, 0, 0, "/tmp/ckpt/step-4"},
                                  ControlCommand{ControlCommand::Kind::kGeneration, 2, 3, 1, 5, 5, "/tmp/g3.json"},
                                  ControlCommand{ControlCommand::Kind::kStop, 2, 0, 0, 0, 0, "/tmp/ckpt"},
                                  // Paths with spaces arrive whole (they once arrived cut at the space).
                                  ControlCommand{ControlCommand::Kind::kStop, 2, 0, 0, 0, 0, "/data/run 2/ckpt"},
                                  ControlCommand{ControlCommand::Kind::kGo, 4, 0, 0, 0, 0, "/data/run 2/step-4 "}}) {
    const ControlCommand back = runtime::ParseCommand(runtime::FormatCommand(c));
    EXPECT_EQ(back.kind, c.kind);
    EXPECT_EQ(back.step, c.step);
    EXPECT_EQ(back.generation, c.generation);
    EXPECT_EQ(back.rank, c.rank);
    EXPECT_EQ(back.world, c.world);
    EXPECT_EQ(back.path, c.path);
    EXPECT_EQ(back.restore, c.restore);
    EXPECT_EQ(back.restore_from, c.restore_from);
  }
  EXPECT_THROW(runtime::FormatCommand(ControlCommand{ControlCommand::Kind::kStop, 2, 0, 0, 0, 0, "/a\nb"}), Error);
  EXPECT_THROW(runtime::ParseCommand("stop 2"), Error);
  EXPECT_THROW(runtime::ParseCommand("gen 1 2"), Error);
  EXPECT_THROW(runtime::ParseCommand("gen 1 2 0 2 1 9 /g.json /ckpt"), Error);  // 9 bytes do not end at a space
  EXPECT_THROW(runtime::ParseCommand("gen 1 2 0 2 1 40 /g.json"), Error);
  EXPECT_THROW(runtime::ParseCommand("reboot"), Error);
}

}  // namespace
}  // namespace loom
