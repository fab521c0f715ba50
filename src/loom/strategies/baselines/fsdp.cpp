// Fully sharded data parallelism (PyTorch FSDP / ZeRO-3): every module
// replicated on all GPUs with weights, gradients and optimizer state sharded
// over all of them; each layer's weights are all-gathered before its forward
// and backward and its gradients reduce-scattered, overlapping compute.
// Searched: gradient-accumulation steps (microbatches) and recomputation.
#include <fmt/format.h>

#include "loom/strategies/baselines/baselines.h"
#include "loom/strategies/plan_builders.h"
#include "loom/strategies/search/candidate_search.h"
#include "loom/strategies/search/pipeline_grid.h"

namespace loom {

StrategyResult DataParallelOnAllGpus(const StrategyContext& ctx, const std::string& name, int zero_stage,
                                     const std::string& searched) {
  CandidateSearch search(ctx, name);
  const int n = ctx.cluster.num_gpus();
  if (ctx.workload.global_batch % n == 0) {
    search.Expect(static_cast<int64_t>(Divisors(ctx.workload.global_batch / n).size()));
    for (int m : Divisors(ctx.workload.global_batch / n)) {
      search.Try([&](Recompute r) {
        return SingleUnitPlan(ctx, name, 1, 1, n, 1, m, ScheduleKind::kOneFOneB, r, Balance::kParams, zero_stage);
      });
    }
  } else {
    search.Skip(fmt::format("the global batch ({}) does not split evenly over the {} GPUs, one data-parallel rank each",
                            ctx.workload.global_batch, n));
  }
  return search.Finish(searched, [](const Plan& p) { return DescribeUnit(p.units[0], p.group_gpus); });
}

StrategyResult FsdpStrategy(const StrategyContext& ctx) {
  return DataParallelOnAllGpus(ctx, "fsdp", 3, "dp = all GPUs, ZeRO-3, x accumulation steps x recompute");
}

}  // namespace loom
