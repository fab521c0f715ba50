// Issue 45's runtime cases: what a worker reports is read as it was written
// (NaN included), and a run that diverged fails instead of reporting a loss
// of 0 and exiting 0.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "loom/error.h"
#include "loom/runtime/report_line.h"
#include "loom/runtime/run_reports.h"
#include "loom/runtime/worker_message.h"
#include "reference.h"

namespace loom {
namespace {

using namespace runtime_test;

TEST(ReportLine, ReadsWhatFmtWritesForNonFiniteNumbers) {
  runtime::ReportLine nan(fmt::format("loss 1 {:.17g}", -std::nan("")));
  EXPECT_EQ(nan.kind(), "loss");
  EXPECT_EQ(nan.Int(), 1);
  EXPECT_TRUE(std::isnan(nan.Number()));
  runtime::ReportLine inf(fmt::format("time 0 {:.9g}", HUGE_VAL));
  inf.Int();
  EXPECT_EQ(inf.Number(), HUGE_VAL);
  runtime::ReportLine note("note phase 0: 2 green contexts");
  EXPECT_EQ(note.Rest(), "phase 0: 2 green contexts");
}

TEST(ReportLine, AFieldThatIsMissingOrNotANumberIsAnError) {
  runtime::ReportLine missing("loss 1");
  missing.Int();
  EXPECT_THROW(missing.Number(), Error);
  runtime::ReportLine garbage("loss x 0.5");
  EXPECT_THROW(garbage.Int(), Error);
  runtime::ReportLine half("time 0 1.5s");
  half.Int();
  EXPECT_THROW(half.Number(), Error);
}

// Every message comes back as itself, numbers bit for bit (17 significant
// digits), nan and inf included; a line that is no message is an error.
TEST(WorkerMessage, EveryMessageRoundTrips) {
  namespace r = runtime::report;
  const double third = 1.0 / 3.0;
  const std::vector<runtime::WorkerMessage> all = {r::Loss{3, -std::nan("")},
                                                   r::Loss{0, third},
                                                   r::StepTime{2, HUGE_VAL},
                                                   r::Param{third, 2e-300, 7.0},
                                                   r::PeakMemory{123456789.0},
                                                   r::PeakTensorMemory{0.5},
                                                   r::Interval{4, 1, 17, third, 2 * third},
                                                   r::Note{"phase 0: 2 green\ncontexts"},
                                                   r::Failure{"stage 1 (vit) died"},
                                                   r::Heartbeat{},
                                                   r::Ready{2, third, 1LL << 40},
                                                   r::Done{1, 5},
                                                   r::Saved{1, 6},
                                                   r::Stopped{7},
                                                   r::Dying{3, 12345.678}};
  for (const auto& m : all) {
    const std::string line = runtime::Encode(m);
    EXPECT_EQ(line.find('\n'), std::string::npos) << line;
    const runtime::WorkerMessage back = runtime::Decode(line);
    ASSERT_EQ(back.index(), m.index()) << line;
    EXPECT_EQ(runtime::Encode(back), line);
  }
  const auto loss = std::get<r::Loss>(runtime::Decode(runtime::Encode(r::Loss{0, third})));
  EXPECT_EQ(loss.value, third);  // exactly
  EXPECT_TRUE(std::isnan(std::get<r::Loss>(runtime::Decode(runtime::Encode(r::Loss{1, std::nan("")}))).value));
  EXPECT_EQ(std::get<r::Note>(runtime::Decode(runtime::Encode(r::Note{"a\nb"}))).text, "a b");
  EXPECT_THROW(runtime::Decode("lost 1 0.5"), Error);
  EXPECT_THROW(runtime::Decode("done 1"), Error);
  EXPECT_THROW(runtime::Decode(""), Error);
}

TEST(ReportLine, DivergenceNamesTheFirstNonFiniteStep) {
  const double nan = std::nan("");
  EXPECT_EQ(runtime::Divergence({2.0, 1.5}, {1, 1}, {{1.0, 2.0}}), "");
  // A step nobody reported is NaN by construction, not a divergence.
  EXPECT_EQ(runtime::Divergence({2.0, nan}, {1, 0}, {}), "");
  const std::string why = runtime::Divergence({2.0, nan, nan}, {1, 1, 1}, {});
  EXPECT_NE(why.find("the loss of step 1 is nan"), std::string::npos) << why;
  EXPECT_NE(runtime::Divergence({2.0}, {1}, {{1.0}, {HUGE_VAL}}).find("process 1's parameters"), std::string::npos);
}

// `loom run --lr 1e30`: the workers' losses are NaN from step 1 on. The run
// used to print "loss 0.000000", write losses of 0.0 and exit 0.
TEST(Runtime, ADivergedRunFailsNamingTheStep) {
  const TinyRun s;
  const std::string plan = MegatronPlanFile(s, ScheduleKind::kOneFOneB, 1, "run-diverged.json");
  auto [code, out] = LoomCli("run --model " + s.model_path + " --cluster h100:1x2 " + s.data_args + " --plan " + plan +
                             " --lr 1e30 --steps 3 --timeout 20 --json");
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("training diverged: the loss of step"), std::string::npos) << out;
  EXPECT_EQ(out.find("\"losses\""), std::string::npos) << out;
}

// A sequence longer than a layer's learned positions (GPT-2's 1024, a ViT's
// 257) failed inside a worker with libtorch's words; it is named before any
// worker starts, with the module, the layer and what would fit.
TEST(Runtime, ASequencePastTheLearnedPositionsIsNamedBeforeTheRun) {
  const std::string model = test::WriteTemp("positions-16.yaml", R"(model: positions-16
modules:
  - name: llm
    role: backbone
    modality: text
    tokens: {source: text}
    layers:
      - {kind: embedding, vocab: 128, hidden: 64, positions: 16}
      - {kind: transformer, count: 2, hidden: 64, ffn_hidden: 128, heads: 4, causal: true}
      - {kind: lm_head, vocab: 128, hidden: 64}
)");
  auto [code, out] =
      LoomCli("run --model " + model + " --cluster h100:1x1 --workload text --seq-len 24 --global-batch 2 --steps 1");
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("module llm packs a sequence of 24 tokens, but its layer 0 (embedding) has 16 learned positions; "
                     "valid: positions >= 24"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("libtorch"), std::string::npos) << out;
  std::tie(code, out) =
      LoomCli("run --model " + model + " --cluster h100:1x1 --workload text --seq-len 16 --global-batch 2 --steps 1");
  EXPECT_EQ(code, 0) << out;
}

}  // namespace
// Issue 45: a scheduler that stops `loom run` signals the launcher alone;
// its workers used to train on with no parent. Each worker now dies with it.
namespace {

// The processes whose parent is `parent` (/proc/PID/stat's fourth field).
std::vector<pid_t> ChildrenOf(pid_t parent) {
  std::vector<pid_t> out;
  DIR* proc = opendir("/proc");
  while (dirent* e = proc ? readdir(proc) : nullptr) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    std::ifstream stat(std::string("/proc/") + e->d_name + "/stat");
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    int ppid = 0;
    if (std::sscanf(line.c_str() + close + 1, " %c %d", &state, &ppid) == 2 && ppid == parent) out.push_back(pid);
  }
  if (proc) closedir(proc);
  return out;
}

// Ended: no such process, or a zombie nobody reaped yet.
bool Ended(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z';
}

}  // namespace

TEST(Runtime, WorkersDieWithTheirLauncher) {
  for (const int sig : {SIGKILL, SIGTERM, SIGINT}) {
    const std::vector<std::string> args = {LOOM_BINARY, "run",  "--model",    kModel,   "--cluster",      "h100:1x2",
                                           "--dp",      "2",    "--workload", "text",   "--global-batch", "32",
                                           "--seq-len", "1024", "--steps",    "1000000"};
    const pid_t launcher = fork();
    ASSERT_GE(launcher, 0);
    if (launcher == 0) {
      std::vector<char*> argv;
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      freopen("/dev/null", "w", stdout);
      freopen("/dev/null", "w", stderr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    // Its two workers, once both are forked (they start before any step).
    std::vector<pid_t> workers;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (workers.size() < 2 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      workers = ChildrenOf(launcher);
    }
    ASSERT_EQ(workers.size(), 2u) << "signal " << sig;
    std::this_thread::sleep_for(std::chrono::seconds(1));  // in step 0, which takes some 6 s
    kill(launcher, sig);
    int status = 0;
    waitpid(launcher, &status, 0);
    EXPECT_TRUE(WIFSIGNALED(status)) << "signal " << sig;
    // Well before step 0 ends: a worker's next report would find the pipe
    // closed and end it by SIGPIPE, so only a short wait tells the fix apart.
    const auto gone_by = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    bool all_ended = false;
    while (!all_ended && std::chrono::steady_clock::now() < gone_by) {
      all_ended = std::all_of(workers.begin(), workers.end(), Ended);
      if (!all_ended) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_TRUE(all_ended) << "signal " << sig << ": a worker outlived its launcher";
    for (pid_t w : workers) kill(w, SIGKILL);  // whatever the outcome, none is left behind
  }
}

}  // namespace loom
