// MMScale (seed 002) and the two variants its paper measures against.
#include "loom/strategies/mmscale/batch_reorder.h"
#include "loom/strategies/mmscale/mmscale.h"
#include "loom/strategies/registry.h"

namespace loom {
namespace {

IterationSchedule MmscaleBatch(const StrategyContext& ctx, const Plan& plan, const Batch& batch, int64_t iteration) {
  return MmscaleScheduleBatch(ctx.model, ctx.cluster, ctx.workload, plan, batch, iteration);
}

const StrategyRegistration kMmscale({"mmscale",
                                     "MMScale: encoder, backbone and generator on disjoint GPUs with their own "
                                     "TP/DP/PP (Alg. 1 allocation), brokers, per-batch intra- and inter-microbatch "
                                     "reordering",
                                     100, MmscaleStrategy, StatelessScheduler(MmscaleBatch)});
const StrategyRegistration kRatio({"mmscale-ratio",
                                   "MMScale's ratio-based baseline: the same units, GPUs in proportion to FLOPs, no "
                                   "reordering",
                                   1000,
                                   MmscaleRatioStrategy,
                                   {},
                                   true});
const StrategyRegistration kNoReorder({"mmscale-noreorder",
                                       "MMScale's allocation trained in the loader's (random) order",
                                       1001,
                                       MmscaleNoReorderStrategy,
                                       {},
                                       true});

}  // namespace
}  // namespace loom
