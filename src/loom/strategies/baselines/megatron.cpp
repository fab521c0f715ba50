// Megatron-LM as the seed papers run it (MMScale §7, PipeWeaver §8): every
// module in one pipeline, encoders in the first stages with the backbone's TP
// and DP (replicated inside the TP group where heads do not divide), stages
// balanced by parameter count. Searched: TP in {1,2,4,8} inside a node, every
// PP dividing the rest, DP = the remainder, every microbatch count, 1F1B and
// interleaved (vpp 2 and 4), and the cheapest recomputation that fits.
#include <fmt/format.h>

#include "loom/strategies/baselines/baselines.h"
#include "loom/strategies/plan_builders.h"
#include "loom/strategies/search/candidate_search.h"
#include "loom/strategies/search/pipeline_grid.h"

namespace loom {

StrategyResult MegatronStrategy(const StrategyContext& ctx) {
  CandidateSearch search(ctx, "megatron");
  const int layers = ctx.model.num_layers();
  auto grid = [&] {
    ForEachPipelineGrid(ctx, layers, [&](int tp, int pp, int dp, int m) {
      search.Try([&](Recompute r) {
        return SingleUnitPlan(ctx, "megatron", tp, pp, dp, 1, m, ScheduleKind::kOneFOneB, r, Balance::kParams, 1);
      });
      for (int vpp : {2, 4}) {
        if (pp == 1 || m % pp != 0 || pp * vpp > layers) continue;
        search.Try([&](Recompute r) {
          return SingleUnitPlan(ctx, "megatron", tp, pp, dp, vpp, m, ScheduleKind::kInterleaved, r, Balance::kParams,
                                1);
        });
      }
    });
  };
  search.Run(grid);
  return search.Finish(
      "tp x pp x dp x microbatches x {1f1b, interleaved vpp 2/4} x recompute, stages balanced by "
      "parameters",
      [](const Plan& p) { return DescribeUnit(p.units[0], p.group_gpus); });
}

// Megatron-LM as Mosaic §5.1 configures it: every module data parallel over
// every GPU (TP 1, PP 1), modules one after another inside each step. Only
// the microbatches (gradient accumulation) and recomputation are searched.
StrategyResult MegatronDpStrategy(const StrategyContext& ctx) {
  return DataParallelOnAllGpus(ctx, "megatron-dp", 1, "dp = all GPUs (tp 1, pp 1) x accumulation steps x recompute");
}

}  // namespace loom
