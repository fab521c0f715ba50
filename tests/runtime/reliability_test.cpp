// Issue 45's runtime cases: what a worker reports is read as it was written
// (NaN included), and a run that diverged fails instead of reporting a loss
// of 0 and exiting 0.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "loom/error.h"
#include "loom/runtime/report_line.h"
#include "loom/runtime/run.h"
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
                                                   r::LossScale{4, 65536.0, true},
                                                   r::LossScale{5, third, false},
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
                                                   r::Dying{3, 12345.678},
                                                   r::WeightsRead{{"model.embed_tokens.weight", "lm_head.weight"}}};
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
  EXPECT_EQ(std::get<r::WeightsRead>(runtime::Decode(runtime::Encode(r::WeightsRead{{"a.w", "b.w"}}))).names,
            (std::vector<std::string>{"a.w", "b.w"}));
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
  EXPECT_NE(out.find("run failed: training diverged at step 1: the loss is nan"), std::string::npos) << out;
  EXPECT_NE(out.find("(every process)"), std::string::npos) << out;
  EXPECT_EQ(out.find("\"losses\""), std::string::npos) << out;
}

// A one-module text model named `name` whose embedding and 2 transformer
// layers are `embedding` and `transformer` (YAML flow maps' fields), and a
// 1-step run of it on text samples of `seq_len` tokens.
std::string TextModel(const std::string& name, const std::string& embedding, const std::string& transformer) {
  return test::WriteTemp(name + ".yaml", fmt::format(R"(model: {}
modules:
  - name: llm
    role: backbone
    modality: text
    tokens: {{source: text}}
    layers:
      - {{kind: embedding, vocab: 128, hidden: 64{}}}
      - {{kind: transformer, count: 2, hidden: 64, ffn_hidden: 128, heads: 4, causal: true{}}}
      - {{kind: lm_head, vocab: 128, hidden: 64}}
)",
                                                     name, embedding, transformer));
}
std::pair<int, std::string> RunText(const std::string& model, int seq_len) {
  return LoomCli("run --model " + model + " --cluster h100:1x1 --workload text --seq-len " + std::to_string(seq_len) +
                 " --global-batch 2 --steps 1");
}

// A sequence longer than a layer's learned positions (GPT-2's 1024, a ViT's
// 257) failed inside a worker with libtorch's words; it is named before any
// worker starts, with the module, the layer and what would fit.
TEST(Runtime, ASequencePastTheLearnedPositionsIsNamedBeforeTheRun) {
  const std::string model = TextModel("positions-16", ", positions: 16", "");
  auto [code, out] = RunText(model, 24);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("module llm packs a sequence of 24 tokens, but its layer 0 (embedding) has 16 learned positions; "
                     "valid: positions >= 24"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("libtorch"), std::string::npos) << out;
  std::tie(code, out) = RunText(model, 16);
  EXPECT_EQ(code, 0) << out;
}

// Issue 41: a rotary model is refused a sequence longer than config.json's
// max_position_embeddings (`rope_max_positions`), naming both, before any
// worker starts; a Llama config.json carries its limit into the spec.
TEST(Runtime, ASequencePastARotaryModelsPositionsIsNamedBeforeTheRun) {
  const std::string model =
      TextModel("rope-positions-16", "", ", norm: rms, rope_theta: 10000, rope_max_positions: 16");
  auto [code, out] = RunText(model, 24);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("module llm packs a sequence of 24 tokens, but its layer 1 was made for 16 positions "
                     "(rope_max_positions, config.json's max_position_embeddings); valid: sequences of at most 16"),
            std::string::npos)
      << out;
  std::tie(code, out) = RunText(model, 16);
  EXPECT_EQ(code, 0) << out;
  const std::string dir = (std::filesystem::temp_directory_path() / "loom_tests" / "rope-config").string();
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128,
    "max_position_embeddings": 20, "rope_theta": 10000.0, "rms_norm_eps": 1e-6})";
  std::tie(code, out) = RunText(dir, 24);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("was made for 20 positions"), std::string::npos) << out;
}

}  // namespace
// Issue 45: a scheduler that stops `loom run` signals the launcher alone;
// its workers used to train on with no parent. The launcher now passes
// SIGINT, SIGTERM and SIGHUP on, and its workers die with it under SIGKILL.
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

// Starts the built `loom` with `args`, its stdout and stderr to files.
pid_t StartLoom(const std::vector<std::string>& args, const std::string& out_path, const std::string& err_path) {
  std::fflush(stdout);  // or the child's freopen writes this process's buffered output again
  const pid_t pid = fork();
  if (pid == 0) {
    std::vector<const char*> argv = {LOOM_BINARY};
    for (const auto& a : args) argv.push_back(a.c_str());
    argv.push_back(nullptr);
    freopen(out_path.c_str(), "w", stdout);
    freopen(err_path.c_str(), "w", stderr);
    execv(argv[0], const_cast<char* const*>(argv.data()));
    _exit(127);
  }
  return pid;
}

// Every process descended from `root` that is alive now, added to `seen`.
void AddDescendants(pid_t root, std::set<pid_t>& seen) {
  for (pid_t c : ChildrenOf(root)) {
    seen.insert(c);
    AddDescendants(c, seen);
  }
}

// Waits up to `limit_s` for `pid` (a child of this process) to end, watching
// its descendants meanwhile; true, with its wait status, when it ended.
bool WaitWatching(pid_t pid, double limit_s, std::set<pid_t>& seen, int& status) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
  while (std::chrono::steady_clock::now() < deadline) {
    AddDescendants(pid, seen);
    if (waitpid(pid, &status, WNOHANG) == pid) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// True once every process in `pids` has ended, waiting up to `limit_s`.
bool AllEnd(const std::set<pid_t>& pids, double limit_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
  for (;;) {
    if (std::all_of(pids.begin(), pids.end(), Ended)) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST(Runtime, WorkersDieWithTheirLauncher) {
  for (const int sig : {SIGKILL, SIGTERM, SIGINT, SIGHUP}) {
    const std::vector<std::string> args = {"run",  "--model",   kModel,       "--cluster", "h100:1x2",
                                           "--dp", "2",         "--workload", "text",      "--global-batch",
                                           "32",   "--seq-len", "1024",       "--steps",   "1000000"};
    const std::string err = test::WriteTemp("die-with-launcher.err", "");
    const pid_t launcher = StartLoom(args, "/dev/null", err);
    ASSERT_GE(launcher, 0);
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
    if (sig == SIGKILL) {
      EXPECT_TRUE(WIFSIGNALED(status));
    } else {
      // Passed on: the launcher ends once its workers have, and says why.
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 128 + sig) << "signal " << sig << ", status " << status;
      EXPECT_NE(ReadAll(err).find("loom: stopped by signal " + std::to_string(sig)), std::string::npos) << ReadAll(err);
    }
    // Well before step 0 ends: a worker's next report would find the pipe
    // closed and end it by SIGPIPE, so only a short wait tells the fix apart.
    const bool all_ended = AllEnd({workers.begin(), workers.end()}, 3);
    EXPECT_TRUE(all_ended) << "signal " << sig << ": a worker outlived its launcher";
    for (pid_t w : workers) kill(w, SIGKILL);  // whatever the outcome, none is left behind
  }
}

// Issue 45's chaos test: seeded, bounded, local. Signals, kills and stops
// (SIGSTOP, then SIGCONT) the launcher or one worker at a random moment of a
// short run, under data and pipeline parallelism, plain or fault-tolerant.
// Whatever happens, no process the run started outlives it, the run ends
// within its timeout's bound, and an exit 0 carries exactly the losses of
// the run left alone.
TEST(Chaos, SignalsKillsAndStopsAtRandomMomentsLeaveNoOrphanNoHangAndNoFalseSuccess) {
  struct Layout {
    std::vector<std::string> flags;
    std::vector<double> losses;  // of the run left alone
    double run_s = 0;
  };
  // Runs of about 3 s (8 steps) on 2 cores.
  const std::vector<std::string> base = {"run", "--model",        kModel, "--workload", "text", "--seq-len",
                                         "256", "--global-batch", "16",   "--steps",    "8",    "--timeout",
                                         "5",   "--json"};
  std::vector<Layout> layouts = {
      {{"--cluster", "h100:1x2", "--dp", "2"}},
      {{"--cluster", "h100:1x2", "--pp", "2", "--microbatches", "2"}},
      {{"--cluster", "h100:2x1", "--dp", "2", "--zero-stage", "0", "--fault-tolerance", "1"}}};
  const std::string out = test::WriteTemp("chaos.out", ""), err = test::WriteTemp("chaos.err", "");
  for (Layout& l : layouts) {
    std::vector<std::string> args = base;
    args.insert(args.end(), l.flags.begin(), l.flags.end());
    const auto start = std::chrono::steady_clock::now();
    std::set<pid_t> seen;
    int status = 0;
    const pid_t pid = StartLoom(args, out, err);
    ASSERT_TRUE(WaitWatching(pid, 120, seen, status)) << "the undisturbed run hangs";
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << ReadAll(err);
    l.run_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string text = ReadAll(out);
    const nlohmann::json j = nlohmann::json::parse(text.substr(text.find('{')));
    for (const auto& v : j["losses"]) l.losses.push_back(v.get<double>());
    ASSERT_EQ(l.losses.size(), 8u);
  }
  struct Action {
    const char* name;
    int signal;
  };
  const Action actions[] = {
      {"SIGTERM", SIGTERM}, {"SIGINT", SIGINT}, {"SIGHUP", SIGHUP}, {"SIGKILL", SIGKILL}, {"SIGSTOP", SIGSTOP}};
  // LOOM_CHAOS_SEED and LOOM_CHAOS_TRIALS run a longer soak by hand.
  const char* seed_env = std::getenv("LOOM_CHAOS_SEED");
  const char* trials_env = std::getenv("LOOM_CHAOS_TRIALS");
  std::mt19937 rng(seed_env ? std::atoi(seed_env) : 45);
  const int kTrials = trials_env ? std::atoi(trials_env) : 12;
  // --timeout 5, the launcher's 10 s backstop, the 10 s grace after a
  // forwarded signal, the longest SIGSTOP (3 s) and margin.
  constexpr double kBound_s = 5 + 10 + 10 + 3 + 15;
  for (int trial = 0; trial < kTrials; ++trial) {
    const Layout& l = layouts[rng() % layouts.size()];
    const Action a = actions[rng() % 5];
    const bool at_launcher = rng() % 2 == 0;
    const double delay_s = std::uniform_real_distribution<double>(0, l.run_s)(rng);
    const double stop_s = std::uniform_real_distribution<double>(0.1, 3)(rng);
    std::string flags;
    for (const auto& f : l.flags) flags += " " + f;
    const std::string what = fmt::format("trial {}: {} to {} after {:.2f} s of a run with{}", trial, a.name,
                                         at_launcher ? "the launcher" : "a worker", delay_s, flags);
    SCOPED_TRACE(what);
    std::vector<std::string> args = base;
    args.insert(args.end(), l.flags.begin(), l.flags.end());
    std::set<pid_t> seen;
    int status = 0;
    const pid_t launcher = StartLoom(args, out, err);
    bool ended = WaitWatching(launcher, delay_s, seen, status);
    pid_t target = launcher;
    if (!ended && !at_launcher) {
      // One of the launcher's children: a worker or the fault-tolerant
      // store's process. Before it forked any, the launcher itself.
      const std::vector<pid_t> children = ChildrenOf(launcher);
      if (!children.empty()) target = children[rng() % children.size()];
    }
    const bool hit_launcher = target == launcher;
    SCOPED_TRACE(hit_launcher ? "the launcher was hit" : "a child of the launcher was hit");
    if (!ended) {
      kill(target, a.signal);
      if (a.signal == SIGSTOP) {
        ended = WaitWatching(launcher, stop_s, seen, status);
        kill(target, SIGCONT);
      }
    }
    if (!ended) ended = WaitWatching(launcher, kBound_s, seen, status);
    if (!ended) {
      ADD_FAILURE() << "the run did not end within " << kBound_s << " s of the " << a.name;
      kill(launcher, SIGKILL);
      waitpid(launcher, &status, 0);
    }
    std::printf("%s: %s\n", what.c_str(),
                WIFEXITED(status) ? fmt::format("exit {}", WEXITSTATUS(status)).c_str()
                                  : fmt::format("signal {}", WTERMSIG(status)).c_str());
    EXPECT_TRUE(AllEnd(seen, 5)) << "a process of the run outlived it";
    for (pid_t p : seen) kill(p, SIGKILL);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
      const std::string text = ReadAll(out);
      const size_t brace = text.find('{');
      ASSERT_NE(brace, std::string::npos) << "exit 0 without a result";
      std::vector<double> losses;
      const nlohmann::json j = nlohmann::json::parse(text.substr(brace));
      for (const auto& v : j["losses"]) losses.push_back(v.get<double>());
      ASSERT_EQ(losses.size(), l.losses.size()) << "exit 0 with a result of another length";
      for (size_t i = 0; i < losses.size(); ++i) {
        EXPECT_NEAR(losses[i], l.losses[i], 1e-5 * std::abs(l.losses[i])) << "exit 0 with another loss at step " << i;
      }
    } else if (WIFEXITED(status)) {
      // Failed: said why, with exit 2 (a worker's death) or 128 + the signal passed on.
      const int code = WEXITSTATUS(status);
      EXPECT_TRUE(code == 2 || (hit_launcher && code == 128 + a.signal)) << "exit " << code << ": " << ReadAll(err);
      EXPECT_NE(ReadAll(err).find("loom: "), std::string::npos) << ReadAll(err);
    } else {
      // Ended by the signal itself: SIGKILL, or one that arrived before the launcher caught any.
      EXPECT_TRUE(hit_launcher && WIFSIGNALED(status) && WTERMSIG(status) == a.signal) << "status " << status;
    }
  }
}

// Issue 45's messages that did not name the cause.

// A node that never joins: node 0 alone of two was reported as "rank 0 was
// silent for over 20 s", later as c10d's words with a stack trace. Now the
// store names how many processes it waited for and what to check.
TEST(Runtime, ANodeThatNeverJoinsIsNamedAsSuch) {
  const int port = FreePort();
  auto [code, out] = LoomCli("run --model " + kModel +
                             " --cluster h100:2x1 --dp 2 --workload text --seq-len 32 "
                             "--global-batch 4 --steps 1 --nnodes 2 --node-rank 0 --timeout 4 --master 127.0.0.1:" +
                             std::to_string(port));
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("the run's store at 127.0.0.1:" + std::to_string(port) +
                     " waited 4 s for its 2 processes and not all joined"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("a node never started or cannot reach this address"), std::string::npos) << out;
  EXPECT_EQ(out.find("frame #"), std::string::npos) << "a stack trace in the message:\n" << out;
}

// `--resume` of a missing folder complained about the plan's layout (a
// ZeRO stage the user never chose) instead of the folder.
TEST(Runtime, ResumingFromAMissingFolderNamesTheFolder) {
  auto [code, out] = LoomCli("run --model " + kModel +
                             " --cluster h100:1x1 --workload text --seq-len 32 "
                             "--global-batch 2 --steps 1 --resume /nonexistent/ckpt");
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("--resume /nonexistent/ckpt: no such folder; valid: a checkpoint folder"), std::string::npos)
      << out;
  EXPECT_EQ(out.find("zero_stage"), std::string::npos) << out;
  // A folder in a format this version does not read.
  const std::string dir = (std::filesystem::temp_directory_path() / "loom_tests" / "resume-layout").string();
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/checkpoint.json")
      << R"({"format": "loom-checkpoint-1", "steps_done": 0, "model": "tiny-llm", "seed": 0, "layers": ["llm_0", "llm_1", "llm_2", "llm_3", "llm_4", "llm_5"]})";
  std::tie(code, out) = LoomCli("run --model " + kModel +
                                " --cluster h100:1x1 --workload text --seq-len 32 "
                                "--global-batch 2 --steps 2 --resume " +
                                dir);
  EXPECT_EQ(code, 2) << out;
  // An earlier Loom's fault-tolerant checkpoint is named as such.
  EXPECT_NE(out.find(dir + "/checkpoint.json: field format is 'loom-checkpoint-1'"), std::string::npos) << out;
  EXPECT_NE(out.find("no longer reads"), std::string::npos) << out;
}

// When the fault-tolerant run's store process died, only the survivors'
// "Broken pipe" was named, as if their nodes had failed.
TEST(FaultTolerance, AStoreThatDiesIsNamedNotItsWorkers) {
  const std::string err = test::WriteTemp("store-dies.err", "");
  const pid_t launcher =
      StartLoom({"run", "--model",           kModel,    "--cluster",  "h100:2x1", "--dp",      "2",   "--zero-stage",
                 "0",   "--fault-tolerance", "1",       "--workload", "text",     "--seq-len", "256", "--global-batch",
                 "16",  "--steps",           "1000000", "--timeout",  "10"},
                "/dev/null", err);
  ASSERT_GT(launcher, 0);
  // The store process is the launcher's first child: started before any worker.
  std::set<pid_t> seen;
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::vector<pid_t> children;
  while (children.size() < 3 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    children = ChildrenOf(launcher);
  }
  ASSERT_EQ(children.size(), 3u);
  const pid_t store = *std::min_element(children.begin(), children.end());
  std::this_thread::sleep_for(std::chrono::seconds(1));
  kill(store, SIGKILL);
  ASSERT_TRUE(WaitWatching(launcher, 60, seen, status)) << "the run hung after its store died";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << status;
  const std::string said = ReadAll(err);
  EXPECT_NE(said.find("the run's store process was killed by signal 9"), std::string::npos) << said;
  EXPECT_TRUE(AllEnd(seen, 5));
  for (pid_t p : seen) kill(p, SIGKILL);
}

}  // namespace loom
