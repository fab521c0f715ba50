#include "loom/sim/iteration_bound.h"

#include <algorithm>
#include <map>

namespace loom {

namespace {

// The simulator's duration of a compute action (Simulator::Duration).
double ComputeDuration_s(const Action& a, const PipelineCosts& c) {
  const StageCost& sc = c.at(a.stage, a.microbatch);
  switch (a.kind) {
    case ActionKind::kForward:
      return sc.forward_s;
    case ActionKind::kBackward:
      return sc.backward_data_s + sc.backward_weight_s;
    case ActionKind::kBackwardData:
      return sc.backward_data_s;
    case ActionKind::kBackwardWeight:
      return sc.backward_weight_s;
    default:
      return 0;
  }
}

}  // namespace

double IterationLowerBound_s(const Schedule& schedule, const ExecutionCosts& costs) {
  // The chain argument needs microbatch k of stage v to consume exactly
  // microbatch k of stage v - 1.
  const bool chain = !schedule.dag && schedule.edges.empty() && schedule.stage_microbatches.empty();
  // With fused backwards the input gradient leaves a stage when its whole
  // backward ends; with split ones (zero bubble) after the data part.
  bool split = false;
  for (const auto& actions : schedule.ranks) {
    for (const Action& a : actions) split = split || a.kind == ActionKind::kBackwardData;
  }
  double bound_s = 0;
  for (const PipelineCosts& c : costs.replicas) {
    for (const auto& actions : schedule.ranks) {
      const Action* first = nullptr;
      const Action* last = nullptr;
      double busy_s = 0;
      for (const Action& a : actions) {
        if (!a.is_compute()) continue;
        if (first == nullptr) first = &a;
        last = &a;
        busy_s += ComputeDuration_s(a, c);
      }
      if (first == nullptr) continue;
      double head_s = 0, tail_s = 0;
      if (chain && first->kind == ActionKind::kForward) {
        for (int u = 0; u < first->stage; ++u) head_s += c.at(u, first->microbatch).forward_s;
      }
      if (chain && (last->kind == ActionKind::kBackward || last->kind == ActionKind::kBackwardData)) {
        for (int u = 0; u < last->stage; ++u) {
          const StageCost& sc = c.at(u, last->microbatch);
          tail_s += split ? sc.backward_data_s : sc.backward_data_s + sc.backward_weight_s;
        }
      }
      bound_s = std::max(bound_s, head_s + busy_s + tail_s);
    }
  }
  return bound_s;
}

double IterationLowerBound_s(const ExecutionPlan& exec, const ExecutionCosts& costs) {
  const Schedule& schedule = exec.schedule;
  double bound_s = IterationLowerBound_s(schedule, costs);
  // Phases take turns only where CompileUnits put its barriers.
  // (A replicated plan's ranks are one replica's: each replica takes turns alike.)
  if (schedule.extra_deps.empty()) return bound_s;
  std::vector<int> phase(schedule.num_ranks, 0);
  for (int v = 0; v < schedule.num_stages(); ++v) phase[schedule.stage_rank[v]] = exec.stages[v].phase;
  for (const PipelineCosts& c : costs.replicas) {
    // group -> phase -> the busiest rank's compute
    std::map<int, std::map<int, double>> busiest;
    for (int r = 0; r < schedule.num_ranks; ++r) {
      double busy_s = 0;
      for (const Action& a : schedule.ranks[r]) {
        if (a.is_compute()) busy_s += ComputeDuration_s(a, c);
      }
      const ExecRank& er = exec.ranks[r];
      for (int g = er.group; g < er.group + er.num_groups; ++g) {
        double& b = busiest[g][phase[r]];
        b = std::max(b, busy_s);
      }
    }
    for (const auto& [group, phases] : busiest) {
      double sum_s = 0;
      for (const auto& [p, busy_s] : phases) sum_s += busy_s;
      bound_s = std::max(bound_s, sum_s);
    }
  }
  return bound_s;
}

}  // namespace loom
