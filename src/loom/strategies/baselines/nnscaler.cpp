// nnScaler* as PipeWeaver §8 re-implements it: one static plan generated from
// a representative batch and kept for every batch; 1F1B only, so every
// modality module sits in one pipeline segment; stages cut by simulated time
// on that batch (its chunk partitioning), not by parameters. Searched: TP, PP,
// DP, microbatches and recomputation, on the representative batch.
#include "loom/strategies/baselines/baselines.h"
#include "loom/strategies/plan_builders.h"

namespace loom {

StrategyResult NnScalerStrategy(const StrategyContext& ctx) {
  CandidateSearch search(ctx, "nnscaler");
  const int n = ctx.cluster.num_gpus();
  const int layers = ctx.model.num_layers();
  for (int tp : TpChoices(ctx.cluster)) {
    if (n % tp != 0) continue;
    for (int pp : Divisors(n / tp)) {
      if (pp > layers) break;
      const int dp = n / tp / pp;
      if (ctx.workload.global_batch % dp != 0) continue;
      for (int m : Divisors(ctx.workload.global_batch / dp)) {
        if (m < pp && m != static_cast<int>(ctx.workload.global_batch / dp)) continue;
        // Time-balanced chunks first; parameter-balanced ones when those do not
        // fit (nnScaler's search is memory-constrained too).
        const double before = search.feasible();
        search.Try([&](Recompute r) {
          return SingleUnitPlan(ctx, "nnscaler", tp, pp, dp, 1, m, "1f1b", r, Balance::kTime, 1);
        });
        if (search.feasible() == before) {
          search.Try([&](Recompute r) {
            return SingleUnitPlan(ctx, "nnscaler", tp, pp, dp, 1, m, "1f1b", r, Balance::kParams, 1);
          });
        }
      }
    }
  }
  return search.Finish("tp x pp x dp x microbatches x recompute, 1F1B, stages balanced by time on the "
                       "representative batch",
                       [](const Plan& p) { return DescribeUnit(p.units[0]); });
}

}  // namespace loom
