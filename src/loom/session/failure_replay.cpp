#include "loom/session/failure_replay.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "loom/cost/module_summary.h"
#include "loom/data/sample_source.h"
#include "loom/error.h"
#include "loom/sim/plan_run.h"
#include "loom/strategies/strategy.h"

namespace loom {

namespace {

// One system's iteration on n nodes: seconds per iteration, or why it cannot run.
struct Capacity {
  double iteration_s = 0;  // <= 0: cannot run
  double peak_bytes = 0;
  std::string why;
};

class Planner {
 public:
  Planner(const Model& model, const Cluster& cluster, const Workload& workload, const ReplayOptions& options)
      : model_(model), cluster_(cluster), workload_(workload), options_(options), batch_(DrawBatch(workload, 0)) {}

  Capacity At(const std::string& system, int nodes) {
    if (nodes < 1) return {0, 0, "no node left"};
    if (system == "oobleck") return Raw("oobleck", nodes);
    // Varuna's and Bamboo's grids need the nodes to factor into PP x DP over
    // the batch: they run the fastest grid on at most `nodes` nodes and leave
    // the rest idle (the thesis' point about rigid grids). The largest grid
    // that fits is not always the fastest (a prime node count allows only
    // one pipeline or none).
    Capacity c;
    int used = 0;
    for (int n = nodes; n >= 1; --n) {
      const Capacity& at = Raw("megatron", n);
      if (at.iteration_s > 0 && (used == 0 || at.iteration_s < c.iteration_s)) {
        c = at;
        used = n;
      } else if (n == nodes) {
        c = at;  // keeps why the largest one failed, should none fit
      }
    }
    if (used < 1) return c;
    if (used < nodes) c.why = fmt::format("{} of {} nodes used", used, nodes);
    if (system == "bamboo") {
      // Every node also holds its successor's stage.
      if (2 * c.peak_bytes > cluster_.usable_mem_bytes()) {
        c.why =
            fmt::format("bamboo: twice the plan's peak ({:.1f} GiB) does not fit a GPU", 2 * c.peak_bytes / (1 << 30));
        c.iteration_s = 0;
      } else {
        c.iteration_s *= 1 + options_.redundant_compute;
      }
    }
    return c;
  }

 private:
  // A strategy's plan on `nodes` nodes, simulated; cached.
  const Capacity& Raw(const std::string& strategy, int nodes) {
    auto key = std::make_pair(strategy, nodes);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    Capacity c;
    Cluster sub = cluster_;
    sub.nodes = nodes;
    sub.name = fmt::format("{} ({} nodes left)", cluster_.name, nodes);
    StrategyContext ctx{model_, sub, workload_, batch_, {}};
    ctx.fault_tolerance = options_.fault_tolerance;
    ctx.fixed_recompute = options_.recompute;
    try {
      const StrategyResult r = RunStrategy(strategy, ctx);
      SimOptions summary;  // time and peak only
      summary.record_timelines = false;
      const PlanRun run = RunPlan(model_, sub, workload_, r.plan, batch_, nullptr, summary);
      c.iteration_s = run.metrics.iteration_time_s;
      c.peak_bytes = run.metrics.peak_mem_bytes;
    } catch (const Error& e) {
      c.why = e.what();
    }
    return cache_.emplace(key, c).first->second;
  }

  const Model& model_;
  const Cluster& cluster_;
  const Workload& workload_;
  ReplayOptions options_;
  Batch batch_;
  std::map<std::pair<std::string, int>, Capacity> cache_;
};

}  // namespace

std::vector<SystemReplay> ReplayFailures(const Model& model, const Cluster& cluster, const Workload& workload,
                                         const FailureTrace& trace, const std::vector<std::string>& systems,
                                         const ReplayOptions& options) {
  for (const auto& s : systems) {
    if (s != "oobleck" && s != "varuna" && s != "bamboo") {
      throw Error(fmt::format("replay: unknown system '{}'; valid: oobleck, varuna, bamboo", s));
    }
  }
  if (options.checkpoint_every < 1 || !(options.storage_bytes_per_s > 0)) {
    throw Error("replay: the checkpoint interval and the storage bandwidth must be positive");
  }
  if (!(options.restart_s >= 0) || !(options.detect_s >= 0) || !(options.bamboo_reconfigure_s >= 0)) {
    throw Error("replay: the restart, detection and Bamboo reconfiguration times must not be negative");
  }
  // What a checkpoint writes and loads (weights and optimizer state), unless
  // the write and the load were measured.
  const double state_bytes = ModelCheckpointBytes(model, workload.precision);
  const double save_s =
      options.checkpoint_save_s >= 0 ? options.checkpoint_save_s : state_bytes / options.storage_bytes_per_s;
  const double load_s =
      options.checkpoint_load_s >= 0 ? options.checkpoint_load_s : state_bytes / options.storage_bytes_per_s;
  const double samples = static_cast<double>(workload.global_batch);
  Planner planner(model, cluster, workload, options);
  std::vector<SystemReplay> out;
  for (const auto& system : systems) {
    SystemReplay r;
    r.system = system;
    std::set<int> dead;
    int nodes = trace.nodes;
    Capacity cap = planner.At(system, nodes);
    if (cap.iteration_s <= 0) {
      r.stopped = cap.why;
      r.timeline.push_back({0, trace.duration_s, nodes, 0});
      out.push_back(std::move(r));
      continue;
    }
    // Varuna (and Bamboo's restarts) checkpoint every k iterations: a period
    // of k iterations and one synchronous write.
    const bool checkpoints = system != "oobleck";
    auto period_s = [&](double it) { return checkpoints ? options.checkpoint_every * it + save_s : it; };
    auto rate = [&](double it) {
      return checkpoints ? options.checkpoint_every * samples / period_s(it) : samples / it;
    };
    r.healthy_samples_per_s = rate(cap.iteration_s);
    double seg_start = 0, done = 0;  // done: samples of completed iterations
    for (const FailureEvent& e : trace.events) {
      if (e.time_s >= trace.duration_s || !r.stopped.empty()) break;
      const double it = cap.iteration_s, running = std::max(0.0, e.time_s - seg_start);
      const double speed = rate(it);
      double wasted = 0, downtime = 0;
      std::string what = "node joined: re-planned";
      if (e.kind == NodeEvent::kJoin) {
        dead.erase(e.node);
        ++nodes;
        done += running * speed;  // joins cost nothing here: the next plan starts at once
      } else {
        const bool adjacent = dead.count(e.node - 1) || dead.count(e.node + 1);
        dead.insert(e.node);
        --nodes;
        const bool restart = system == "varuna" || (system == "bamboo" && adjacent);
        if (restart) {  // back to the last checkpoint
          const double P = period_s(it);
          const double periods = std::floor(running / P);
          done += periods * options.checkpoint_every * samples;
          wasted = running - periods * P;
          downtime = options.restart_s + load_s;
          what = system == "bamboo" ? "adjacent nodes lost: restart from the last checkpoint"
                                    : "restart from the last checkpoint, re-planned";
        } else {  // the interrupted iteration only
          const double iterations = std::floor(running * speed / samples);
          done += iterations * samples;
          wasted = running - iterations * samples / speed;
          downtime = options.detect_s;
          if (system == "oobleck") {
            if (options.oobleck_recover_s >= 0) {
              downtime = options.oobleck_recover_s;  // measured
            } else {
              // The failed node's share of the state, copied from replicas over its links.
              downtime += state_bytes / std::max(1, nodes + 1) / (cluster.network.bytes_per_s * cluster.gpus_per_node);
            }
            what = "re-instantiated from templates";
          } else {
            downtime += options.bamboo_reconfigure_s;
            what = "the successor's redundant copy took over";
          }
        }
      }
      if (e.time_s > seg_start) {
        r.timeline.push_back({seg_start, e.time_s, e.kind == NodeEvent::kFail ? nodes + 1 : nodes - 1, speed});
      } else if (!r.timeline.empty() && r.timeline.back().end_s > e.time_s) {
        // It struck while the last one was still being recovered from: that
        // recovery stops here and this one starts over.
        const double cut = r.timeline.back().end_s - std::max(r.timeline.back().start_s, e.time_s);
        r.timeline.back().end_s -= cut;
        if (!r.events.empty()) r.events.back().lost_s -= cut;
      }
      r.events.push_back({e.time_s, e.node, wasted + downtime, what});
      const double resume = std::min(trace.duration_s, e.time_s + downtime);
      if (downtime > 0) r.timeline.push_back({e.time_s, resume, nodes, 0});
      seg_start = resume;
      cap = planner.At(system, nodes);
      if (cap.iteration_s <= 0) {
        r.stopped = fmt::format("at {:.0f} s with {} nodes: {}", e.time_s, nodes, cap.why);
        r.timeline.push_back({seg_start, trace.duration_s, nodes, 0});
      }
    }
    if (r.stopped.empty() && seg_start < trace.duration_s) {
      done += (trace.duration_s - seg_start) * rate(cap.iteration_s);
      r.timeline.push_back({seg_start, trace.duration_s, nodes, rate(cap.iteration_s)});
    }
    r.mean_samples_per_s = done / trace.duration_s;
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace loom
