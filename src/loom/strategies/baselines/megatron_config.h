// What `loom simulate` flags describe: one Megatron-LM layout with fixed
// degrees (every module's layers in one pipeline, the encoders whole on the
// first stage as current Megatron-LM runs them, all with the backbone's TP, CP and DP; a module whose heads do not
// divide by TP is replicated inside the TP group). It is built as a Plan, so
// `loom simulate` and `loom plan` compile, price and simulate one object and
// agree on time and memory. Stages are cut by the min-max partitioner on the
// layers' forward + backward time over the representative batch.
#pragma once

#include <string>

#include "loom/plan/plan.h"
#include "loom/sim/plan_run.h"
#include "loom/sim/simulator.h"
#include "loom/strategies/strategy.h"

namespace loom {

struct ParallelConfig {
  int tp = 1, pp = 1, dp = 1, cp = 1, vpp = 1;
  int microbatches = 1;  // per DP replica per iteration
  ScheduleKind schedule = ScheduleKind::kOneFOneB;
  Recompute recompute = Recompute::kNone;
  SimOptions sim;

  // Throws loom::Error naming each factor and what would be valid: the product
  // must equal the cluster's GPUs, TP must fit in a node, the global batch must
  // split into dp x microbatches, the model must have pp x vpp stages' worth of LLM layers.
  void Validate(const Model& model, const Cluster& cluster, const Workload& workload) const;
};

// The layout as a plan (strategy "megatron"). Throws what Validate throws.
Plan MegatronConfigPlan(const StrategyContext& context, const ParallelConfig& config);

// Draws batch `iteration`, builds the plan and simulates it. Throws loom::Error
// for an invalid configuration or a plan that does not fit in memory.
PlanRun SimulateConfig(const Model& model, const Cluster& cluster, const Workload& workload,
                       const ParallelConfig& config, int64_t iteration = 0);

}  // namespace loom
