#include "loom/strategies/search/pipeline_grid.h"

namespace loom {

std::vector<int> Divisors(int64_t n) {
  std::vector<int> d;
  for (int64_t i = 1; i <= n; ++i) {
    if (n % i == 0) d.push_back(static_cast<int>(i));
  }
  return d;
}

std::vector<int> TpChoices(const Cluster& c) {
  std::vector<int> out;
  for (int tp : {1, 2, 4, 8}) {
    if (tp <= c.gpus_per_node && c.gpus_per_node % tp == 0) out.push_back(tp);
  }
  return out;
}

void ForEachPipelineGrid(const StrategyContext& ctx, int max_pp, const std::function<void(int, int, int, int)>& visit) {
  const int n = ctx.cluster.num_gpus();
  for (int tp : TpChoices(ctx.cluster)) {
    if (n % tp != 0 || (ctx.fixed_tp > 0 && tp != ctx.fixed_tp)) continue;
    for (int pp : Divisors(n / tp)) {
      if (pp > max_pp) break;
      if (ctx.fixed_pp > 0 && pp != ctx.fixed_pp) continue;
      const int dp = n / tp / pp;
      if (ctx.workload.global_batch % dp != 0 || (ctx.fixed_dp > 0 && dp != ctx.fixed_dp)) continue;
      const int64_t per_replica = ctx.workload.global_batch / dp;
      for (int m : Divisors(per_replica)) {
        if (m < pp && m != per_replica) continue;  // a pipeline needs >= pp microbatches to fill
        visit(tp, pp, dp, m);
      }
    }
  }
}

}  // namespace loom
