// Compiles a Plan for one batch (plan/compile_plan.h), prices the result
// (sim/price_execution.h) and simulates it, then measures it: iteration
// time, MFU, bubbles, memory per GPU group (summed over the units that share a
// group) and whether every group fits in GPU memory. Metric definitions:
// docs/metrics.md.
#pragma once

#include <string>
#include <vector>

#include "loom/data/sample.h"
#include "loom/plan/execution_plan.h"
#include "loom/sim/price_execution.h"
#include "loom/sim/sim_result.h"
#include "loom/sim/simulator.h"
#include "loom/spec/workload.h"

namespace loom {

struct PlanMetrics {
  double iteration_time_s = 0;
  double mfu = 0;             // useful FLOPs / (time x cluster GPUs x peak)
  double bubble_ratio = 0;    // idle share of the used GPUs' compute (SM-fraction weighted)
  double peak_mem_bytes = 0;  // the fullest GPU
  double throughput_samples_per_s = 0;
  double throughput_tokens_per_s = 0;  // the busiest module's tokens
};

struct PlanRun {
  ExecutionPlan exec;  // with the gradient-sync actions the simulator added (intervals index them)
  ExecutionCosts costs;
  SimResult result;
  PlanMetrics metrics;
  std::vector<int> groups;               // GPU groups reported (one per memory curve)
  std::vector<std::string> group_names;  // what runs on each
  std::vector<double> group_peak_mem_bytes;  // per group, its fullest data-parallel replica's
  // [replica * groups + group]: each replica's own peak, on its share of the
  // batch (a replicated plan's; else the one replica's, as above).
  std::vector<double> replica_group_peak_mem_bytes;
  std::vector<std::vector<MemoryPoint>> group_memory;  // step functions, summed over co-located ranks (when recorded)
  std::vector<std::string> memory_violations;          // one per group over capacity
};

// Throws loom::Error for an invalid plan; memory overflows are returned in
// memory_violations (searches skip such plans; CheckFits turns them into errors).
// Prices with the cluster's cost model (Cluster::cost_model). Without
// SimOptions::record_timelines, a plan whose replicas are independent copies
// is compiled folded (CompileOptions::fold_replicas): the same metrics, its
// exec then holds one replica's ranks.
// `memo`, when not null, caches prices across calls on one batch (PricingMemo).
PlanRun RunPlan(const Model& model, const Cluster& cluster, const Workload& workload, const Plan& plan,
                const Batch& batch, const IterationSchedule* iteration = nullptr, SimOptions options = {},
                PricingMemo* memo = nullptr);

// Simulates an already compiled (and priced) plan: what RunPlan does after compiling.
PlanRun RunExecution(const Cluster& cluster, ExecutionPlan exec, ExecutionCosts costs, SimOptions options = {});

// Throws loom::Error listing every group that does not fit.
void CheckFits(const PlanRun& run, const std::string& where);

}  // namespace loom
