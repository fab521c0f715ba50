// DistTrain (Entrain §4.7's baseline; the system MMScale's paper describes,
// strategies/mmscale/): MMScale's disaggregated units and Alg. 1 allocation,
// profiled as DistTrain profiles, on one sample (Entrain Table 4.1), and its
// per-batch data reordering. Entrain runs every framework at one TP and DP
// with microbatches of mu samples; with --tp / --dp pinned, Alg. 1 keeps only
// that TP and DP for every unit, and each replica runs B / (DP mu)
// microbatches. The allocation is Alg. 1's best (its own choice from the
// one-sample profile) that fits in memory, not re-ranked by the simulator: the
// thesis' point is what that profile chooses.
#include <fmt/format.h>

#include "loom/error.h"
#include "loom/strategies/baselines/baselines.h"
#include "loom/strategies/mmscale/batch_reorder.h"
#include "loom/strategies/mmscale/mmscale.h"
#include "loom/strategies/search/candidate_search.h"

namespace loom {

namespace {

constexpr int kRanked = 48;

int BackbonePp(const AllocationProblem& p, const Allocation& a) {
  for (size_t u = 0; u < p.units.size(); ++u) {
    if (p.units[u].backbone) return a.units[u].pp;
  }
  return 0;
}

StrategyResult SearchDisttrain(const StrategyContext& ctx, const std::string& name, bool reorder) {
  if (ctx.representative.samples.empty()) throw Error("disttrain: the representative batch is empty");
  const Batch one{{ctx.representative.samples.front()}};  // DistTrain's profile: one sample
  StrategyContext profiled{ctx.model, ctx.cluster, ctx.workload, one, ctx.progress};
  const MmscaleUnits units = SplitMmscaleUnits(ctx.model);
  const int64_t mu = ctx.workload.microbatch_size;
  CandidateSearch search(ctx, name);
  // Judged as it trains: with its per-batch reordering (which samples share a
  // microbatch changes the activations each one holds), or in the loader's order.
  if (reorder) {
    search.SetBatchSchedule([&](const Plan& plan) {
      return MmscaleScheduleBatch(ctx.model, ctx.cluster, ctx.workload, plan, ctx.representative, 0);
    });
  }
  int ranked = 0, matched = 0;
  for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
    AllocationProblem p = MakeAllocationProblem(profiled, units, r);
    for (auto& u : p.units) {
      std::vector<UnitModel> keep;
      for (const UnitModel& m : u.options) {
        if (ctx.fixed_tp <= 0 || m.tp == ctx.fixed_tp) keep.push_back(m);
      }
      u.options = keep;
    }
    if (ctx.fixed_dp > 0) p.dp_choices = {ctx.fixed_dp};
    const std::vector<Allocation> allocations = AllocateResources(p, kRanked);
    ranked += static_cast<int>(allocations.size());
    bool fitted = false;
    for (const Allocation& a : allocations) {
      // --pp pins the backbone's pipeline (the unit Megatron-LM's PP means).
      if (ctx.fixed_pp > 0 && BackbonePp(p, a) != ctx.fixed_pp) continue;
      ++matched;
      Plan plan = AllocationPlan(profiled, name, units, a, r);
      int dp_lm = 1;
      for (size_t u = 0; u < units.names.size(); ++u) {
        if (units.names[u] == "backbone") dp_lm = a.units[u].dp;
      }
      if (mu > 1 && ctx.workload.global_batch % (dp_lm * mu) == 0) {
        for (auto& u : plan.units)
          u.pipelines[0].microbatches = static_cast<int>(ctx.workload.global_batch / (dp_lm * mu));
      }
      if (search.Evaluate(plan) >= 0) {
        fitted = true;
        break;  // Alg. 1's own choice
      }
    }
    if (fitted) break;
  }
  if (ranked == 0) search.Skip("no TP x DP x PP split fits every unit in memory under MMScale's model");
  if (ranked > 0 && matched == 0) {
    search.Skip(fmt::format("none of the {} best-ranked TP x DP x PP splits that fit has the backbone at --pp {}",
                            ranked, ctx.fixed_pp));
  }
  return search.Finish(fmt::format("{}: MMScale Alg. 1 on a one-sample profile{}{}, the best allocation that "
                                   "fits, lowest recomputation first",
                                   name, ctx.fixed_tp > 0 ? fmt::format(", TP {}", ctx.fixed_tp) : "",
                                   ctx.fixed_dp > 0 ? fmt::format(", DP {}", ctx.fixed_dp) : "") +
                           (ctx.fixed_pp > 0 ? fmt::format(", backbone PP {}", ctx.fixed_pp) : ""),
                       [](const Plan& p) {
                         std::string s;
                         for (const auto& u : p.units) {
                           s += fmt::format("{}{} tp{} pp{} dp{}", s.empty() ? "" : "; ", u.name, u.tp,
                                            u.pipelines[0].pp, u.num_replicas() * p.group_gpus / u.tp);
                         }
                         return s + fmt::format("; m{} 1f1b, recompute={}", p.units[0].pipelines[0].microbatches,
                                                RecomputeName(p.units[0].recompute));
                       });
}

}  // namespace

StrategyResult DisttrainStrategy(const StrategyContext& ctx) { return SearchDisttrain(ctx, "disttrain", true); }

StrategyResult DisttrainLoaderOrderStrategy(const StrategyContext& ctx) {
  return SearchDisttrain(ctx, "disttrain-loader-order", false);
}

}  // namespace loom
