// The Megatron-style grid the strategies' searches walk: tensor-parallel
// degrees, divisors, and every (tp, pp, dp, microbatches) point.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "loom/spec/cluster.h"
#include "loom/strategies/strategy.h"

namespace loom {

// Divisors of n in increasing order.
std::vector<int> Divisors(int64_t n);
// Tensor-parallel degrees to try: 1, 2, 4, 8 that divide a node.
std::vector<int> TpChoices(const Cluster& cluster);

// Calls visit(tp, pp, dp, microbatches) for every Megatron-style grid point:
// TP from TpChoices, PP dividing the rest with pp <= max_pp, DP = the rest
// dividing the global batch, and every microbatch count m >= pp that divides
// the replica's samples (m < pp only when it is all of them). The context's
// fixed_tp / fixed_pp, when set, pin TP and PP.
void ForEachPipelineGrid(const StrategyContext& ctx, int max_pp,
                         const std::function<void(int tp, int pp, int dp, int microbatches)>& visit);

}  // namespace loom
