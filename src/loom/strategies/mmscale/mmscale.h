// The MMScale strategy (seed 002, also published as DistTrain): one unit per
// module group (encoders, backbone, generator) on disjoint GPUs, each with
// its own TP, DP and PP from the adaptive resource allocation (allocation.h),
// joined by gcd(DP_up, DP_down) brokers, and per batch the data-aware
// reordering (intra_reorder.h, inter_reorder.h). docs/strategies.md, "mmscale".
#pragma once

#include <string>
#include <vector>

#include "loom/strategies/mmscale/allocation.h"
#include "loom/strategies/strategy.h"

namespace loom {

// The units MMScale disaggregates, in pipeline order: every module before the
// backbone (one encoder unit, branches in model order), the backbone, every
// module after it (one generator unit, absent when there is none).
struct MmscaleUnits {
  std::vector<std::string> names;                 // "encoder", "backbone", "generator"
  std::vector<std::vector<std::string>> modules;  // per unit
};
MmscaleUnits SplitMmscaleUnits(const Model& model);

// The allocation problem for a model, cluster and representative batch: C_u(TP)
// and the memory terms from the cost model at recomputation `recompute`.
AllocationProblem MakeAllocationProblem(const StrategyContext& ctx, const MmscaleUnits& units, Recompute recompute);

// The plan an allocation describes (groups of the largest TP's size).
Plan AllocationPlan(const StrategyContext& ctx, const std::string& strategy, const MmscaleUnits& units,
                    const Allocation& allocation, Recompute recompute);

StrategyResult MmscaleStrategy(const StrategyContext& ctx);
// The paper's baselines (§7.2): GPUs split in proportion to FLOPs; and MMScale's
// plan trained in the loader's (random) order.
StrategyResult MmscaleRatioStrategy(const StrategyContext& ctx);
StrategyResult MmscaleNoReorderStrategy(const StrategyContext& ctx);

}  // namespace loom
