// Training checkpoints (`loom run --checkpoint-dir D`, `--resume D`; issue 42;
// weights/run_checkpoint.h): a run stopped and resumed under the same plan
// continues with exactly the losses and weights of one that never stopped;
// under another plan (other TP, PP, DP and ZeRO degrees, CP) with the same up
// to the order of fp32 sums; a crash during a save leaves the previous
// checkpoint whole; and what is not this run's checkpoint is refused by name.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "test_util.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

fs::path TempDir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / "loom_tests" / (std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  return dir;
}

const std::string kCheckpointRunArgs =
    " --workload text --global-batch 8 --seq-len 32 --precision fp32 --timeout 30 --lr-schedule cosine "
    "--warmup-steps 1 --json ";

// tiny-llm with its head tied to the embedding (a tied copy per stage under PP).
// tiny-llm with its head tied to the embedding and a vocabulary of 127,
// which TP 2 splits 63 + 64: a checkpoint of a TP run holds uneven slices.
std::string TiedModel() {
  std::ifstream in(std::string(LOOM_TEST_DATA) + "/runtime/tiny-llm.yaml");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string embedding = "{kind: embedding, vocab: 128, hidden: 64}";
  text.replace(text.find(embedding), embedding.size(), "{kind: embedding, vocab: 127, hidden: 64}");
  const std::string head = "{kind: lm_head, vocab: 128, hidden: 64}";
  text.replace(text.find(head), head.size(), "{kind: lm_head, vocab: 127, hidden: 64, tied: true}");
  return test::WriteTemp("tiny-llm-tied.yaml", text);
}

nlohmann::json RunTraining(const std::string& args) {
  auto [code, out] = test::RunLoom("run" + kCheckpointRunArgs + args);
  EXPECT_EQ(code, 0) << args << "\n" << out;
  return code == 0 ? nlohmann::json::parse(out) : nlohmann::json();
}

// Same plan: steps 2-3 after a resume are the uninterrupted run's, bit for
// bit, the schedule's learning rate and the weights included; under ZeRO-2 too
// (each replica's optimizer shard comes back as its range).
TEST(Checkpoints, ResumeUnderTheSamePlanContinuesExactly) {
  const std::string model = " --model " + TiedModel();
  for (const std::string layout :
       {" --cluster h100:1x2 --pp 2 --microbatches 4", " --cluster h100:1x2 --dp 2 --zero-stage 2 --microbatches 2"}) {
    SCOPED_TRACE(layout);
    const fs::path dir = TempDir("ckpt_same");
    const nlohmann::json whole = RunTraining(model + layout + " --steps 4");
    const nlohmann::json first = RunTraining(model + layout + " --steps 2 --checkpoint-dir " + dir.string());
    ASSERT_TRUE(fs::exists(dir / "step-00000002" / "checkpoint.json"));
    EXPECT_EQ(first["losses"],
              nlohmann::json(std::vector<double>(whole["losses"].begin(), whole["losses"].begin() + 2)));
    const std::string metrics = dir.string() + ".metrics.jsonl";
    const nlohmann::json rest =
        RunTraining(model + layout + " --steps 4 --resume " + dir.string() + " --metrics " + metrics);
    ASSERT_FALSE(rest.is_null());
    EXPECT_EQ(rest["first_step"].get<int>(), 2);
    // The step record continues too: the first run's steps (kept beside its
    // checkpoints) and the resumed run's, in one metrics file.
    std::ifstream in(metrics);
    int row = 0;
    for (std::string line; std::getline(in, line); ++row) {
      const auto j = nlohmann::json::parse(line);
      EXPECT_EQ(j["step"].get<int>(), row);
      EXPECT_EQ(j["loss"].get<double>(), whole["losses"][row].get<double>()) << row;
    }
    EXPECT_EQ(row, 4);
    for (int s = 2; s < 4; ++s) {
      EXPECT_EQ(rest["losses"][s].get<double>(), whole["losses"][s].get<double>()) << "step " << s;
      EXPECT_EQ(rest["lrs"][s].get<double>(), whole["lrs"][s].get<double>()) << "step " << s;
    }
    EXPECT_EQ(rest["params"], whole["params"]);
  }
}

// Another plan: a checkpoint saved under TP 2 resumes under one process, PP
// 2 (the tied head's copy taken from the embedding), DP 2 with ZeRO-3, CP 2
// and PP 2 x DP 2 with ZeRO-1, and one saved under DP 2 ZeRO-3 (ranges),
// under PP 2 and under PP 2 x DP 2 ZeRO-1 resumes under TP 2: each continues
// as the uninterrupted one-process run did, up to fp32 sums in another order.
TEST(Checkpoints, ResumeUnderAnotherPlanContinuesTheRun) {
  const std::string model = " --model " + TiedModel();
  const nlohmann::json whole = RunTraining(model + " --cluster h100:1x1 --steps 4");
  auto expect_continues = [&](const std::string& saved_under, const std::string& resumed_under) {
    SCOPED_TRACE(saved_under + " -> " + resumed_under);
    const fs::path dir = TempDir("ckpt_other");
    RunTraining(model + saved_under + " --steps 2 --checkpoint-dir " + dir.string());
    const nlohmann::json rest = RunTraining(model + resumed_under + " --steps 4 --resume " + dir.string());
    ASSERT_FALSE(rest.is_null());
    for (int s = 2; s < 4; ++s) {
      const double want = whole["losses"][s].get<double>();
      EXPECT_NEAR(rest["losses"][s].get<double>(), want, 1e-5 * want) << "step " << s;
      EXPECT_NEAR(rest["grad_norms"][s].get<double>(), whole["grad_norms"][s].get<double>(),
                  1e-4 * whole["grad_norms"][s].get<double>())
          << "step " << s;
    }
  };
  const std::string tp2 = " --cluster h100:1x2 --tp 2";
  for (const std::string other : {" --cluster h100:1x1", " --cluster h100:1x2 --pp 2 --microbatches 2",
                                  " --cluster h100:1x2 --dp 2 --zero-stage 3", " --cluster h100:1x2 --cp 2"}) {
    expect_continues(tp2, other);
  }
  expect_continues(" --cluster h100:1x2 --dp 2 --zero-stage 3", tp2);
  expect_continues(" --cluster h100:1x2 --pp 2 --microbatches 2", tp2);
  // Both tied copies' stages sharded at ZeRO-1 (the head's copy restored
  // from the embedding, whose step count it takes), and saved as ranges.
  const std::string pp_dp = " --cluster h100:1x4 --pp 2 --dp 2 --zero-stage 1 --microbatches 2";
  expect_continues(tp2, pp_dp);
  expect_continues(pp_dp, tp2);
}

// Another strategy: a checkpoint of a Megatron TP 2 run resumes under
// MMScale's disaggregated units with brokers and its reordering, PipeWeaver's
// woven pipelines, Entrain's deferral schedule and Optimus' phases (a `loom
// plan --json` file), each continuing as that strategy's uninterrupted run did.
TEST(Checkpoints, ResumeUnderAnotherStrategysPlan) {
  const std::string data = std::string(LOOM_TEST_DATA) + "/runtime/";
  const std::string base = " --model " + data + "tiny-vlm.yaml --workload " + data +
                           "tiny-laion.yaml --precision fp32 --cluster h100:1x2 --timeout 30 --json";
  const std::string plans = (TempDir("ckpt_plans") += ".json").string();
  auto [code, out] = test::RunLoom("plan" + base.substr(0, base.find(" --timeout")) +
                                   " --strategy mmscale,pipeweaver,entrain,optimus --json " + plans);
  ASSERT_EQ(code, 0) << out;
  const fs::path dir = TempDir("ckpt_strategy");
  auto [saved, text] = test::RunLoom("run" + base + " --tp 2 --steps 2 --checkpoint-dir " + dir.string());
  ASSERT_EQ(saved, 0) << text;
  for (const std::string strategy : {"mmscale", "pipeweaver", "entrain", "optimus"}) {
    SCOPED_TRACE(strategy);
    const std::string run = "run" + base + " --plan " + plans + " --strategy " + strategy + " --steps 4";
    auto [c1, whole] = test::RunLoom(run);
    auto [c2, rest] = test::RunLoom(run + " --resume " + dir.string());
    ASSERT_EQ(c1, 0) << whole;
    ASSERT_EQ(c2, 0) << rest;
    const auto w = nlohmann::json::parse(whole), r = nlohmann::json::parse(rest);
    for (int s = 2; s < 4; ++s) {
      const double want = w["losses"][s].get<double>();
      EXPECT_NEAR(r["losses"][s].get<double>(), want, 1e-5 * want) << "step " << s;
    }
  }
}

// `--kernel-trace` on a run resumed at its last step would trace the only
// step it trains, whose tensor bytes the profiler keeps from Loom's count: no
// trace is written, and the run says why (runtime/kernel_trace.h). Resumed two
// steps before its end, it traces the last.
TEST(Checkpoints, AKernelTraceOfARunResumedAtItsLastStepIsNoneAndSaysWhy) {
  const std::string run = "run --model " + std::string(LOOM_TEST_DATA) +
                          "/runtime/tiny-llm.yaml --cluster h100:1x1 --workload text --global-batch 4 --seq-len 32 "
                          "--precision fp32 --timeout 30";
  const fs::path dir = TempDir("ckpt_ktrace"), traces = TempDir("ckpt_ktrace_out");
  auto [saved, text] = test::RunLoom(run + " --steps 2 --checkpoint-dir " + dir.string());
  ASSERT_EQ(saved, 0) << text;
  auto [last, last_out] =
      test::RunLoom(run + " --steps 3 --resume " + dir.string() + " --kernel-trace " + traces.string());
  ASSERT_EQ(last, 0) << last_out;
  EXPECT_NE(last_out.find("--kernel-trace: step 2 is the only step this run trains"), std::string::npos) << last_out;
  EXPECT_EQ(last_out.find("kernel traces of step"), std::string::npos) << last_out;
  EXPECT_FALSE(fs::exists(traces / "process-0.json"));
  auto [two, two_out] =
      test::RunLoom(run + " --steps 4 --resume " + dir.string() + " --kernel-trace " + traces.string());
  ASSERT_EQ(two, 0) << two_out;
  EXPECT_NE(two_out.find("kernel traces of step 3"), std::string::npos) << two_out;
  EXPECT_TRUE(fs::exists(traces / "process-0.json"));
}

// A process dies while the checkpoint of step 4 is being written (after its
// part, before the commit): the run fails, `latest` still names step 2,
// whole, and resuming from the folder continues from step 2 as the
// uninterrupted run did. The next save replaces the leftover staging folder.
TEST(Checkpoints, CrashDuringSaveLeavesThePreviousCheckpointWhole) {
  const std::string run =
      " --model " + std::string(LOOM_TEST_DATA) + "/runtime/tiny-llm.yaml --cluster h100:1x2 --dp 2";
  const nlohmann::json whole = RunTraining(run + " --steps 4");
  for (const int dying : {0, 1}) {
    SCOPED_TRACE(dying);
    const fs::path dir = TempDir("ckpt_crash");
    auto [code, out] = test::RunLoom("run" + kCheckpointRunArgs + run + " --steps 4 --checkpoint-dir " + dir.string() +
                                     " --checkpoint-every 2 --kill-rank " + std::to_string(dying) + " --kill-step 4");
    EXPECT_NE(code, 0) << out;
    std::ifstream latest(dir / "latest");
    std::string name;
    latest >> name;
    EXPECT_EQ(name, "step-00000002");
    EXPECT_TRUE(fs::exists(dir / "step-00000002" / "checkpoint.json"));
    EXPECT_FALSE(fs::exists(dir / "step-00000004"));
    const nlohmann::json rest =
        RunTraining(run + " --steps 4 --checkpoint-dir " + dir.string() + " --resume " + dir.string());
    ASSERT_FALSE(rest.is_null());
    for (int s = 2; s < 4; ++s) EXPECT_EQ(rest["losses"][s].get<double>(), whole["losses"][s].get<double>());
    std::ifstream after(dir / "latest");
    after >> name;
    EXPECT_EQ(name, "step-00000004");
    EXPECT_FALSE(fs::exists(dir / ".staging-step-00000004"));
  }
}

// `loom run` stopped by a signal (a scheduler's SIGTERM, a terminal's
// Ctrl-C): with --checkpoint-dir every worker finishes the step it is in and
// saves it, the launcher exits 128 + the signal naming the checkpoint, and a
// resume goes on exactly as a run that was never stopped.
TEST(Checkpoints, ASignalStopsTheRunAtACheckpointThatResumes) {
  const fs::path dir = TempDir("ckpt_signal");
  const std::string err = (TempDir("ckpt_signal_err") += ".txt").string();
  const std::string model = std::string(LOOM_TEST_DATA) + "/runtime/tiny-llm.yaml";
  std::vector<std::string> args = {
      LOOM_BINARY,  "run",    "--model",          model,        "--cluster",          "h100:1x2", "--dp",        "2",
      "--workload", "text",   "--global-batch",   "8",          "--seq-len",          "32",       "--precision", "fp32",
      "--steps",    "100000", "--checkpoint-dir", dir.string(), "--checkpoint-every", "1",        "--timeout",   "30"};
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    freopen("/dev/null", "w", stdout);
    freopen(err.c_str(), "w", stderr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  // Once a few steps are saved (each step is), the scheduler's signal.
  for (int i = 0; i < 600 && !fs::exists(dir / "step-00000003"); ++i) usleep(50 * 1000);
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM);
  std::ifstream in(err);
  const std::string said((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(said.find("stopped by signal 15"), std::string::npos) << said;
  EXPECT_NE(said.find("its latest checkpoint is " + dir.string() + "/step-"), std::string::npos) << said;
  std::ifstream latest(dir / "latest");
  std::string name;
  latest >> name;
  ASSERT_EQ(name.rfind("step-", 0), 0u) << name;
  const int n = std::stoi(name.substr(5));
  ASSERT_GE(n, 3);
  // The same run (its constant learning rate: a schedule would span --steps), uninterrupted and resumed.
  const std::string run = "run --model " + model +
                          " --cluster h100:1x2 --dp 2 --workload text --global-batch 8 --seq-len 32 --precision fp32 "
                          "--timeout 30 --json --steps " +
                          std::to_string(n + 2);
  auto [c1, t1] = test::RunLoom(run);
  auto [c2, t2] = test::RunLoom(run + " --resume " + dir.string());
  ASSERT_EQ(c1, 0) << t1;
  ASSERT_EQ(c2, 0) << t2;
  const auto whole = nlohmann::json::parse(t1), rest = nlohmann::json::parse(t2);
  EXPECT_EQ(rest["first_step"].get<int>(), n);
  for (int s = n; s < n + 2; ++s) EXPECT_EQ(rest["losses"][s].get<double>(), whole["losses"][s].get<double>()) << s;
}

// What is not this run's checkpoint: named errors, exit 2, before any worker starts.
TEST(Checkpoints, RefusesWhatIsNotThisRunsCheckpoint) {
  const std::string llm = " --model " + std::string(LOOM_TEST_DATA) + "/runtime/tiny-llm.yaml --cluster h100:1x1";
  const fs::path dir = TempDir("ckpt_bad");
  RunTraining(llm + " --steps 2 --checkpoint-dir " + dir.string());
  auto expect = [](const std::string& args, const std::string& words) {
    auto [code, out] = test::RunLoom("run" + kCheckpointRunArgs + args);
    EXPECT_EQ(code, 2) << args << "\n" << out;
    EXPECT_NE(out.find(words), std::string::npos) << args << "\n" << out;
  };
  const fs::path empty = TempDir("ckpt_empty");
  fs::create_directories(empty);
  expect(llm + " --steps 3 --resume " + empty.string(), "holds no checkpoint");
  expect(llm + " --steps 2 --resume " + dir.string(), "the checkpoint is after step 2 already");
  expect(llm + " --steps 3 --seed 7 --resume " + dir.string(), "the checkpoint's data stream is seed 0");
  expect(" --model " + std::string(LOOM_TEST_DATA) + "/runtime/tiny-vlm.yaml --cluster h100:1x1 --steps 3 --resume " +
             dir.string(),
         "a checkpoint of model 'tiny-llm', not of this one ('tiny-vlm'): ");
  expect(llm + " --steps 3 --checkpoint-dir " + dir.string(), "holds another run's checkpoints (");
  std::ofstream(empty / "notes.txt") << "mine";
  expect(llm + " --steps 3 --checkpoint-dir " + empty.string(), "holds notes.txt, which is not a checkpoint's");
  // A partial checkpoint: a part its manifest lists is gone.
  fs::remove(dir / "step-00000002" / "part-00000.safetensors");
  expect(llm + " --steps 3 --resume " + dir.string(), "a partial checkpoint: part part-00000.safetensors");
  // A checkpoint of a model with the same name and other shapes.
  const fs::path other = TempDir("ckpt_shapes");
  RunTraining(llm + " --steps 2 --checkpoint-dir " + other.string());
  std::ifstream in(std::string(LOOM_TEST_DATA) + "/runtime/tiny-llm.yaml");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  text.replace(text.find("ffn_hidden: 128"), 15, "ffn_hidden: 96");
  expect(" --model " + test::WriteTemp("tiny-llm-narrow.yaml", text) + " --cluster h100:1x1 --steps 3 --resume " +
             other.string(),
         "a checkpoint of model 'tiny-llm', whose architecture is another: module llm layer 2: ffn_hidden is 128 "
         "there, 96 here");
  // Runtime audit R4-06 and R4-09: the model is what it computes, not its
  // name, and the data stream its samples. Another eps under the same name
  // is refused; the same model under another name resumes; other samples
  // (a longer sequence: another stream) are refused.
  std::string eps = text;
  eps.replace(eps.find("ffn_hidden: 96"), 14, "ffn_hidden: 128, norm_eps: 1.0e-6");
  expect(" --model " + test::WriteTemp("tiny-llm-eps.yaml", eps) + " --cluster h100:1x1 --steps 3 --resume " +
             other.string(),
         "module llm layer 2: norm_eps is 1e-05 there, 1e-06 here");
  std::string my_llm = text;
  my_llm.replace(my_llm.find("ffn_hidden: 96"), 14, "ffn_hidden: 128");
  my_llm.replace(my_llm.find("model: tiny-llm"), 15, "model: my-llm");
  auto [renamed_code, renamed_out] =
      test::RunLoom("run" + kCheckpointRunArgs + " --model " + test::WriteTemp("my-llm.yaml", my_llm) +
                    " --cluster h100:1x1 --steps 3 --resume " + other.string());
  EXPECT_EQ(renamed_code, 0) << renamed_out;
  std::string longer = kCheckpointRunArgs;
  longer.replace(longer.find("--seq-len 32"), 12, "--seq-len 16");
  auto [longer_code, longer_out] = test::RunLoom("run" + longer + llm + " --steps 3 --resume " + other.string());
  EXPECT_EQ(longer_code, 2) << longer_out;
  EXPECT_NE(longer_out.find("the checkpoint's data stream is another than this run's workload: text: seq_len is 32 "
                            "there, 16 here; the steps would not continue it"),
            std::string::npos)
      << longer_out;
  // Runtime audit R4-02: the AdamW step counts. Lost from a part's metadata,
  // AdamW restarted in silence; a manifest behind its parts replayed a step.
  const fs::path good = other / "step-00000002";
  const fs::path lost = TempDir("ckpt_steps_lost");
  fs::copy(good, lost, fs::copy_options::recursive);
  const auto [py, py_out] = test::RunPython(R"(
import sys
from safetensors import safe_open
from safetensors.numpy import save_file
f = sys.argv[1]
with safe_open(f, "np") as r:
    meta = {k: v for k, v in r.metadata().items() if not k.startswith("loom.step.")}
    tensors = {k: r.get_tensor(k) for k in r.keys()}
save_file(tensors, f, metadata=meta)
)",
                                            (lost / "part-00000.safetensors").string());
  ASSERT_EQ(py, 0) << py_out;
  expect(llm + " --steps 3 --resume " + lost.string(), "has AdamW moments ('");
  expect(llm + " --steps 3 --resume " + lost.string(), "but no step count loom.step.");
  const fs::path behind = TempDir("ckpt_steps_behind");
  fs::copy(good, behind, fs::copy_options::recursive);
  nlohmann::json manifest = nlohmann::json::parse(std::ifstream(behind / "checkpoint.json"));
  manifest["steps_done"] = 1;
  std::ofstream(behind / "checkpoint.json") << manifest.dump();
  expect(llm + " --steps 3 --resume " + behind.string(), "checkpoint.json says 1 steps done, but '");
  // A step folder named for another step than its manifest says.
  const fs::path renamed = TempDir("ckpt_named") / "step-00000005";
  fs::create_directories(renamed.parent_path());
  fs::copy(good, renamed, fs::copy_options::recursive);
  expect(llm + " --steps 6 --resume " + renamed.string(), "says 2 steps done, but the folder is named for 5");
  // A pipe where a checkpoint file belongs blocked the launcher in open() (R4-03).
  const fs::path piped = TempDir("ckpt_fifo");
  fs::copy(good, piped, fs::copy_options::recursive);
  fs::remove(piped / "checkpoint.json");
  ASSERT_EQ(::mkfifo((piped / "checkpoint.json").c_str(), 0600), 0);
  expect(llm + " --steps 3 --resume " + piped.string(), "checkpoint.json: a pipe (FIFO); expected a checkpoint file");
  // A record that is not a file: the run trained and saved, then failed (or,
  // resuming, left the earlier steps out in silence; R4-16).
  const fs::path recorded = TempDir("ckpt_record");
  fs::copy(other, recorded, fs::copy_options::recursive);
  fs::remove(recorded / "metrics.jsonl");
  fs::create_directories(recorded / "metrics.jsonl");
  expect(llm + " --steps 3 --resume " + recorded.string(),
         "metrics.jsonl: a folder; expected the run's per-step record");
  expect(llm + " --steps 3 --checkpoint-dir " + recorded.string(), "metrics.jsonl is a folder; the run's per-step");
}

}  // namespace
}  // namespace loom
