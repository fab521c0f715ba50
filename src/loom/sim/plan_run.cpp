#include "loom/sim/plan_run.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "loom/error.h"
#include "loom/human_bytes.h"
#include "loom/plan/compile_plan.h"

namespace loom {

PlanRun RunPlan(const Model& model, const Cluster& c, const Workload& w, const Plan& plan, const Batch& batch,
                const IterationSchedule* it, SimOptions options, PricingMemo* memo) {
  // Without timelines nothing names a replica's ranks: a plan of independent
  // replica copies is simulated folded (the same times and peaks on a
  // schedule dp times smaller; CompileOptions::fold_replicas).
  CompileOptions compile;
  compile.fold_replicas = !options.record_timelines;
  ExecutionPlan exec = CompilePlan(model, c, w, plan, batch, it, compile);
  ExecutionCosts costs = PriceExecution(exec, model, c, batch, nullptr, memo);
  return RunExecution(c, std::move(exec), std::move(costs), options);
}

PlanRun RunExecution(const Cluster& c, ExecutionPlan exec, ExecutionCosts costs, SimOptions options) {
  PlanRun run;
  run.exec = std::move(exec);
  run.costs = std::move(costs);
  const int p = run.exec.schedule.num_ranks;
  // Ranks by GPU group: ranks sharing a group (temporal phases) add up their
  // memory. A replicated plan's ranks are one replica's; every replica
  // (weighted by the copies it stands for) has them on its own groups, and a
  // group's curve is the fullest replica's.
  std::map<int, std::vector<int>> by_group;
  for (int rank = 0; rank < p; ++rank) {
    // A rank spanning several groups holds its per-GPU memory on every GPU of each.
    for (int g = run.exec.ranks[rank].group; g < run.exec.ranks[rank].group + run.exec.ranks[rank].num_groups; ++g) {
      by_group[g].push_back(rank);
    }
  }
  options.memory_groups.clear();
  for (const auto& [g, ranks] : by_group) options.memory_groups.push_back(ranks);
  Simulator::Parts parts = Simulator(std::move(run.exec.schedule), std::move(run.costs.replicas), options).Release();
  run.exec.schedule = std::move(parts.schedule);  // with the gradient-sync actions it added (intervals index them)
  run.costs.replicas = std::move(parts.replicas);
  run.result = std::move(parts.result);
  const SimResult& r = run.result;
  const ExecutionPlan& s = run.exec;
  const ExecutionCosts& k = run.costs;
  const double T = r.iteration_time_s;
  PlanMetrics& m = run.metrics;
  m.iteration_time_s = T;
  m.mfu = k.model_flops / (T * c.num_gpus() * PeakFlops(c.gpu, s.precision));
  m.throughput_samples_per_s = static_cast<double>(s.samples) / T;
  m.throughput_tokens_per_s = k.tokens / T;

  double busy = 0, replicas_weight = 0;
  const int reps = s.replicated ? static_cast<int>(k.replicas.size()) : 1;
  for (int rep = 0; rep < reps; ++rep) {
    const double weight = s.replicated ? k.replica_weight[rep] : 1;
    replicas_weight += weight;
    for (int rank = 0; rank < p; ++rank) {
      busy += weight * r.busy_s[rep * p + rank] * s.ranks[rank].sm_fraction * s.ranks[rank].num_groups;
    }
  }
  const double capacity = T * replicas_weight * static_cast<double>(by_group.size());
  const int groups = static_cast<int>(by_group.size());
  int g_index = 0;
  for (const auto& [g, ranks] : by_group) {
    std::string names;
    for (int rank : ranks) names += (names.empty() ? "" : " + ") + s.ranks[rank].name;
    int fullest = 0;
    for (int rep = 1; rep < reps; ++rep) {
      if (r.group_peak_mem_bytes[rep * groups + g_index] > r.group_peak_mem_bytes[fullest * groups + g_index]) {
        fullest = rep;
      }
    }
    run.groups.push_back(g);
    run.group_names.push_back(names);
    run.group_peak_mem_bytes.push_back(r.group_peak_mem_bytes[fullest * groups + g_index]);
    if (!r.memory.empty()) {  // the curves were recorded
      std::vector<const std::vector<MemoryPoint>*> curves;
      for (int rank : ranks) curves.push_back(&r.memory[fullest * p + rank]);
      run.group_memory.push_back(ranks.size() == 1 ? *curves[0] : SumMemoryCurves(curves));
    }
    ++g_index;
  }
  // Each data-parallel replica its entry's peaks (replicas of equal costs share one).
  for (int entry : s.replicated ? k.entry_of : std::vector<int>{0}) {
    for (int g = 0; g < groups; ++g) {
      run.replica_group_peak_mem_bytes.push_back(r.group_peak_mem_bytes[entry * groups + g]);
    }
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
