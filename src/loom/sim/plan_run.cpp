#include "loom/sim/plan_run.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "loom/error.h"
#include "loom/plan/compile_plan.h"
#include "loom/human_bytes.h"

namespace loom {

namespace {

// Sum of step functions (each starts at time 0).
std::vector<MemoryPoint> SumCurves(const std::vector<const std::vector<MemoryPoint>*>& curves) {
  std::vector<std::pair<double, double>> deltas;
  for (const auto* c : curves) {
    double prev = 0;
    for (const auto& p : *c) {
      deltas.push_back({p.time_s, p.bytes - prev});
      prev = p.bytes;
    }
  }
  std::sort(deltas.begin(), deltas.end());
  std::vector<MemoryPoint> out;
  double live = 0;
  for (auto [t, d] : deltas) {
    live += d;
    if (!out.empty() && out.back().time_s == t) {
      out.back().bytes = live;
    } else {
      out.push_back({t, live});
    }
  }
  return out;
}

}  // namespace

PlanRun RunPlan(const Model& model, const Cluster& c, const Workload& w, const Plan& plan, const Batch& batch,
                const IterationSchedule* it, SimOptions options) {
  ExecutionPlan exec = CompilePlan(model, c, w, plan, batch, it);
  ExecutionCosts costs = PriceExecution(exec, model, c, batch);
  return RunExecution(c, std::move(exec), std::move(costs), options);
}

PlanRun RunExecution(const Cluster& c, ExecutionPlan exec, ExecutionCosts costs, SimOptions options) {
  PlanRun run;
  run.exec = std::move(exec);
  run.costs = std::move(costs);
  Simulator simulator(run.exec.schedule, run.costs.replicas, options);
  run.exec.schedule = simulator.schedule();  // with the gradient-sync actions it added (intervals index them)
  run.result = simulator.result();
  const SimResult& r = run.result;
  const ExecutionPlan& s = run.exec;
  const ExecutionCosts& k = run.costs;
  const int p = s.schedule.num_ranks;
  const double T = r.iteration_time_s;
  PlanMetrics& m = run.metrics;
  m.iteration_time_s = T;
  m.mfu = k.model_flops / (T * c.num_gpus() * PeakFlops(c.gpu, s.precision));
  m.throughput_samples_per_s = static_cast<double>(s.samples) / T;
  m.throughput_tokens_per_s = k.tokens / T;

  // Ranks by GPU group: ranks sharing a group (temporal phases) add up their
  // memory. A replicated plan's ranks are one replica's; every replica
  // (weighted by the copies it stands for) has them on its own groups, and a
  // group's curve is the fullest replica's.
  double busy = 0, replicas_weight = 0;
  std::map<int, std::vector<int>> by_group;
  for (int rank = 0; rank < p; ++rank) {
    // A rank spanning several groups holds its per-GPU memory on every GPU of each.
    for (int g = s.ranks[rank].group; g < s.ranks[rank].group + s.ranks[rank].num_groups; ++g) {
      by_group[g].push_back(rank);
    }
  }
  const int reps = s.replicated ? static_cast<int>(k.replicas.size()) : 1;
  for (int rep = 0; rep < reps; ++rep) {
    const double weight = s.replicated ? k.replica_weight[rep] : 1;
    replicas_weight += weight;
    for (int rank = 0; rank < p; ++rank) {
      busy += weight * r.busy_s[rep * p + rank] * s.ranks[rank].sm_fraction * s.ranks[rank].num_groups;
    }
  }
  const double capacity = T * replicas_weight * static_cast<double>(by_group.size());
  for (const auto& [g, ranks] : by_group) {
    std::string names;
    for (int rank : ranks) names += (names.empty() ? "" : " + ") + s.ranks[rank].name;
    std::vector<MemoryPoint> fullest;
    double fullest_peak = -1;
    for (int rep = 0; rep < reps; ++rep) {
      std::vector<MemoryPoint> curve;
      double peak = 0;
      if (ranks.size() == 1) {
        peak = r.peak_mem_bytes[rep * p + ranks[0]];
        if (peak <= fullest_peak) continue;
        curve = r.memory[rep * p + ranks[0]];
      } else {
        std::vector<const std::vector<MemoryPoint>*> curves;
        for (int rank : ranks) curves.push_back(&r.memory[rep * p + rank]);
        curve = SumCurves(curves);
        for (const auto& pt : curve) peak = std::max(peak, pt.bytes);
      }
      if (peak > fullest_peak) {
        fullest_peak = peak;
        fullest = std::move(curve);
      }
    }
    run.groups.push_back(g);
    run.group_names.push_back(names);
    run.group_peak_mem_bytes.push_back(fullest_peak);
    run.group_memory.push_back(std::move(fullest));
  }
  m.bubble_ratio = capacity > 0 ? 1.0 - busy / capacity : 0.0;
  const double cap = c.usable_mem_bytes();
  for (size_t i = 0; i < run.groups.size(); ++i) {
    m.peak_mem_bytes = std::max(m.peak_mem_bytes, run.group_peak_mem_bytes[i]);
    if (run.group_peak_mem_bytes[i] > cap) {
      const int g = run.groups[i];
      run.memory_violations.push_back(fmt::format(
          "GPU group {} (GPUs {}..{}: {}) peaks at {}, {} over the {} usable on an {} (its {} less {} of headroom "
          "for the CUDA context and communication buffers)",
          g, g * s.group_gpus, (g + 1) * s.group_gpus - 1, run.group_names[i], HumanBytes(run.group_peak_mem_bytes[i]),
          HumanBytes(run.group_peak_mem_bytes[i] - cap), HumanBytes(cap), c.gpu.name,
          HumanBytes(static_cast<double>(c.gpu.mem_bytes)), HumanBytes(c.mem_headroom_bytes)));
    }
  }
  return run;
}

void CheckFits(const PlanRun& run, const std::string& where) {
  if (run.memory_violations.empty()) return;
  std::string msg = fmt::format("{}: does not fit in memory:", where);
  for (const auto& v : run.memory_violations) msg += "\n  - " + v;
  msg += "\n  use more pipeline or tensor parallelism, recomputation, a higher ZeRO stage or smaller microbatches";
  throw Error(msg);
}

}  // namespace loom
