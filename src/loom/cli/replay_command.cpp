// `loom replay`: training replayed over node failures, Oobleck against Varuna
// (checkpoint and restart) and Bamboo (redundant computation).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "loom/cli/command.h"
#include "loom/cli/common_flags.h"
#include "loom/cli/flag_checks.h"
#include "loom/cli/output_file.h"
#include "loom/error.h"
#include "loom/plan/plan_json.h"
#include "loom/report/replay_report.h"
#include "loom/session/failure_replay.h"
#include "loom/session/failure_trace.h"

namespace loom::cli {

namespace {

// "a,b,c" -> {"a", "b", "c"}: at least one, none named twice (the names
// themselves are checked by ReplayFailures).
std::vector<std::string> SplitSystems(const std::string& list) {
  std::vector<std::string> systems;
  for (std::string rest = list; !rest.empty();) {
    const auto comma = rest.find(',');
    systems.push_back(rest.substr(0, comma));
    rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
  }
  if (systems.empty()) throw Error("--systems: empty; valid: one or more of oobleck, varuna, bamboo");
  for (size_t i = 0; i < systems.size(); ++i) {
    if (std::find(systems.begin(), systems.begin() + i, systems[i]) != systems.begin() + i) {
      throw Error(fmt::format("--systems: {} is named twice; name each system once", systems[i]));
    }
  }
  return systems;
}

class ReplayCommand : public Command {
 public:
  explicit ReplayCommand(CLI::App& app)
      : Command(app.add_subcommand("replay",
                                   "replay training over node failures: oobleck against varuna "
                                   "(checkpoint and restart) and bamboo (redundant computation)")) {
    CLI::App* sub = subcommand();
    problem_.Add(sub);
    sub->add_option("--systems", systems_, "oobleck,varuna,bamboo (default all three)");
    sub->add_option("--mtbf", mtbf_s_, "seconds between failures of the cluster, mean (default 3600)")
        ->check(RealIn(0, kMaxReplaySeconds));
    sub->add_option("--hours", hours_, "wall-clock hours replayed (default 12)")->check(RealIn(0, kMaxReplayHours));
    sub->add_option("--trace-seed", seed_, "seed of the generated failure trace (default 0)")
        ->check(IntIn(0, std::numeric_limits<int64_t>::max()));
    sub->add_option("--min-nodes", min_nodes_, "failures stop at this many nodes (default: half)")
        ->check(IntIn(1, 1 << 20));
    sub->add_option("--failures", trace_, "read the trace from a file of \"TIME_S fail|join NODE\" lines instead");
    sub->add_option("--fault-tolerance", options_.fault_tolerance, "oobleck's f (default 1)")
        ->check(CLI::Range(0, 1000));
    sub->add_option("--checkpoint-every", options_.checkpoint_every, "varuna's iterations per checkpoint (default 10)")
        ->check(kPositiveInt);
    sub->add_flag("--free-checkpoints", free_checkpoints_,
                  "varuna's checkpoints cost nothing to write (thesis Table 2.4's ablation; the restart and the "
                  "load stay)");
    sub->add_flag("--until-last-failure", until_last_failure_,
                  "end the replay at the trace's last failure instead of after --hours (Table 2.2 averages until "
                  "half the nodes are gone)");
    sub->add_option("--recompute", recompute_,
                    "none | selective | full: every system's activation recomputation, pinned (the thesis "
                    "recomputes every layer; default: each plan takes the least that fits)")
        ->check(CLI::IsMember({"none", "selective", "full"}));
    // Measured per model in Oobleck's SOSP'23 artifact (failure_replay.h, ReplayOptions).
    sub->add_option("--restart-s", options_.restart_s, "varuna's restart, seconds (default 60)")
        ->check(NotNegativeRealAtMost(kMaxReplaySeconds));
    sub->add_option(
           "--checkpoint-save-s", options_.checkpoint_save_s,
           "varuna's synchronous checkpoint, seconds (default: weights and optimizer state over the store's bandwidth)")
        ->check(NotNegativeRealAtMost(kMaxReplaySeconds));
    sub->add_option("--checkpoint-load-s", options_.checkpoint_load_s,
                    "loading the checkpoint on a restart, seconds; 0 where --restart-s includes it (default: the state "
                    "over the store's bandwidth)")
        ->check(NotNegativeRealAtMost(kMaxReplaySeconds));
    sub->add_option("--oobleck-recover-s", options_.oobleck_recover_s,
                    "oobleck's reconfiguration after a failure, seconds (default: a heartbeat and the state copy)")
        ->check(NotNegativeRealAtMost(kMaxReplaySeconds));
    sub->add_option("--bamboo-reconfigure-s", options_.bamboo_reconfigure_s,
                    "bamboo's pause after a failure its redundant copy absorbed, seconds (default 0)")
        ->check(NotNegativeRealAtMost(kMaxReplaySeconds));
    sub->add_option("--svg", svg_, "write samples/s over time of every system as an SVG plot")->check(kOutputFile);
    sub->add_option("--json", json_, "write the replay as JSON")->check(kOutputFile);
    sub->add_option("--report", report_, "write an HTML report: the plot, the table, every system's events")
        ->check(kOutputFile);
  }

  void Run() override {
    const Model model = LoadModel(problem_.model);
    const Cluster cluster = problem_.LoadPricedCluster();
    const Workload workload = problem_.workload.ResolveOrDefault(model);
    if (until_last_failure_ && subcommand()->count("--hours") > 0) {
      throw Error("--hours: the replay ends at the trace's last failure with --until-last-failure: give one of them");
    }
    const double duration_s = until_last_failure_ ? kMaxReplaySeconds : hours_ * 3600;
    if (!trace_.empty()) {  // the generator's flags would be ignored
      for (const char* flag : {"--mtbf", "--trace-seed", "--min-nodes"}) {
        if (subcommand()->count(flag) > 0) {
          throw Error(
              fmt::format("{}: shapes a generated trace; --failures {} gives the trace: leave one out", flag, trace_));
        }
      }
    }
    if (min_nodes_ > cluster.nodes) {
      throw Error(fmt::format("--min-nodes {}: the cluster has {} nodes; valid: 1..{}", min_nodes_, cluster.nodes,
                              cluster.nodes));
    }
    FailureTrace trace = trace_.empty() ? GenerateFailureTrace(cluster.nodes, mtbf_s_, duration_s, seed_,
                                                               min_nodes_ >= 0 ? min_nodes_ : (cluster.nodes + 1) / 2)
                                        : ReadFailureTrace(trace_, cluster.nodes, duration_s);
    if (until_last_failure_) EndAtTheLastFailure(trace);
    if (!trace_.empty()) SayEventsPastTheEnd(trace);
    if (free_checkpoints_) options_.checkpoint_save_s = 0;
    if (!recompute_.empty()) options_.recompute = ParseRecompute(recompute_, "--recompute");
    const auto replays = ReplayFailures(model, cluster, workload, trace, SplitSystems(systems_), options_);
    RefuseWhereNoSystemRuns(model, cluster, replays);
    std::cout << FormatReplay(model.name, cluster.name, trace, replays);
    if (!svg_.empty()) {
      WriteText(svg_, ReplaySvg(trace, replays), "--svg");
      std::cout << "Plot written to " << svg_ << "\n";
    }
    if (!report_.empty()) {
      WriteText(report_, ReplayHtml(model.name, cluster.name, trace, replays), "--report");
      std::cout << "Report written to " << report_ << "\n";
    }
    if (!json_.empty()) {
      WriteText(json_, ReplayJson(trace, replays).dump(2) + "\n", "--json");
      std::cout << "Replay written to " << json_ << "\n";
    }
  }

 private:
  // The replay ends at the trace's last failure, which itself is not replayed
  // (the artifact's hard stop); a join after it is not either.
  void EndAtTheLastFailure(FailureTrace& trace) const {
    const auto last = std::find_if(trace.events.rbegin(), trace.events.rend(),
                                   [](const FailureEvent& e) { return e.kind == NodeEvent::kFail; });
    if (last == trace.events.rend()) throw Error("--until-last-failure: the trace has no failure to end at");
    if (!(last->time_s > 0)) {
      throw Error(
          fmt::format("--until-last-failure: the trace's last failure is at {} s, so nothing would be "
                      "replayed; valid: a trace whose last failure is after 0 s, or --hours",
                      last->time_s));
    }
    trace.duration_s = last->time_s;
  }

  // A trace file's events at or after the replay's end are not replayed: said, not dropped in silence.
  void SayEventsPastTheEnd(const FailureTrace& trace) const {
    const auto first = std::find_if(trace.events.begin(), trace.events.end(),
                                    [&](const FailureEvent& e) { return e.time_s >= trace.duration_s; });
    const auto past = trace.events.end() - first;
    if (past == 0 || until_last_failure_) return;
    std::cout << fmt::format(
        "note: {} of {}'s events are at or after the {:g} h replayed (the first at {:g} s) and are not replayed; "
        "--hours {:g} covers them\n",
        past, trace_, trace.duration_s / 3600, first->time_s, std::ceil(trace.events.back().time_s / 3600 + 1e-9));
  }

  // Every system without a plan on the whole cluster: no replay, as `loom plan` finds no plan.
  static void RefuseWhereNoSystemRuns(const Model& model, const Cluster& cluster,
                                      const std::vector<SystemReplay>& replays) {
    std::vector<std::string> why;
    for (const auto& r : replays) {
      if (r.healthy_samples_per_s > 0) return;
      why.push_back(fmt::format("{}: {}", r.system, r.stopped));
    }
    throw Error(fmt::format("no system trains {} on {}, even before any failure:\n  {}", model.name, cluster.name,
                            fmt::join(why, "\n  ")));
  }

  ProblemFlags problem_;
  std::string systems_ = "oobleck,varuna,bamboo";
  double mtbf_s_ = 3600;
  double hours_ = 12;
  uint64_t seed_ = 0;
  int min_nodes_ = -1;  // -1: half the cluster's nodes, rounded up
  std::string trace_;   // --failures
  ReplayOptions options_;
  bool free_checkpoints_ = false;
  std::string recompute_;
  bool until_last_failure_ = false;
  std::string svg_;
  std::string json_;
  std::string report_;
};

}  // namespace

std::unique_ptr<Command> AddReplayCommand(CLI::App& app) { return std::make_unique<ReplayCommand>(app); }

}  // namespace loom::cli
