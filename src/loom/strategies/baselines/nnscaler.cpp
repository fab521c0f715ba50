// nnScaler* as PipeWeaver §8 re-implements it: one static plan generated from
// a representative batch and kept for every batch; 1F1B only, so every
// modality module sits in one pipeline segment; stages cut by simulated time
// on that batch (its chunk partitioning), not by parameters. Searched: TP, PP,
// DP, microbatches and recomputation, on the representative batch.
#include "loom/strategies/baselines/baselines.h"
#include "loom/strategies/plan_builders.h"
#include "loom/strategies/search/candidate_search.h"
#include "loom/strategies/search/pipeline_grid.h"

namespace loom {

StrategyResult NnScalerStrategy(const StrategyContext& ctx) {
  CandidateSearch search(ctx, "nnscaler");
  auto grid = [&] {
    ForEachPipelineGrid(ctx, ctx.model.num_layers(), [&](int tp, int pp, int dp, int m) {
      // Time-balanced chunks first; parameter-balanced ones when those do not
      // fit (nnScaler's search is memory-constrained too).
      auto make = [&](Balance balance) {
        return [&, balance](Recompute r) {
          return SingleUnitPlan(ctx, "nnscaler", tp, pp, dp, 1, m, ScheduleKind::kOneFOneB, r, balance, 1);
        };
      };
      search.TryEither(make(Balance::kTime), make(Balance::kParams));
    });
  };
  search.Run(grid);
  return search.Finish(
      "tp x pp x dp x microbatches x recompute, 1F1B, stages balanced by time on the "
      "representative batch",
      [](const Plan& p) { return DescribeUnit(p.units[0], p.group_gpus); });
}

}  // namespace loom
