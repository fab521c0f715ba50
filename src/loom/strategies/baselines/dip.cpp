// DIP (Entrain §4.7's baseline): the vision encoder and the LLM each
// pipelined over all of a replica's GPU groups, their stages co-located on
// the same GPUs (Table 4.1's E.PP = L.PP = 8*), the encoder's forwards of
// every microbatch before the LLM's and its backwards after all of the LLM's
// (§4.1: "all encoder forwards run before the LLM"; Fig. 4.14's extra
// memory). In Loom's plan terms: two temporal phases on the same groups
// (plan/plan.h shape 3), the encoder's GPipe then the LLM's 1F1B. Stages are
// balanced by the time of one microbatch of mu samples, the profile DIP
// plans from (Table 4.1: profiling size 4). DIP's interleaving of modality
// sub-microbatches inside a microbatch is not modelled: each phase runs whole
// microbatches. Searched: DP and TP (pinned by --dp / --tp), recomputation.
#include <fmt/format.h>

#include "loom/error.h"
#include "loom/strategies/baselines/baselines.h"
#include "loom/strategies/plan_builders.h"
#include "loom/strategies/search/candidate_search.h"
#include "loom/strategies/search/module_waves.h"
#include "loom/strategies/search/pipeline_grid.h"

namespace loom {

StrategyResult DipStrategy(const StrategyContext& ctx) {
  const ModuleWaves waves = SplitWaves(ctx.model);
  std::vector<std::string> encoder, llm;
  for (const auto& m : ctx.model.modules) (waves.IsUpstream(m.name) ? encoder : llm).push_back(m.name);
  if (encoder.empty()) {
    throw Error(
        fmt::format("model {} has no module upstream of its backbone; DIP co-locates an encoder with an "
                    "LLM (valid: a model with an encoder)",
                    ctx.model.name));
  }
  const int64_t mu = ctx.workload.microbatch_size, B = ctx.workload.global_batch;
  std::vector<Sample> first(ctx.representative.samples.begin(),
                            ctx.representative.samples.begin() +
                                std::min<int64_t>(mu, static_cast<int64_t>(ctx.representative.samples.size())));
  const Batch profile{first};  // DIP's profile: one microbatch
  const StrategyContext profiled{ctx.model, ctx.cluster, ctx.workload, profile, ctx.progress};
  const int N = ctx.cluster.num_gpus();
  CandidateSearch search(ctx, "dip");
  auto grid = [&] {
    for (int dp : Divisors(N)) {
      if ((ctx.fixed_dp > 0 && dp != ctx.fixed_dp) || B % (dp * mu) != 0) continue;
      const int K = static_cast<int>(B / (dp * mu));
      for (int g : TpChoices(ctx.cluster)) {
        if ((ctx.fixed_tp > 0 && g != ctx.fixed_tp) || (N / dp) % g != 0) continue;
        const int pp = N / dp / g;
        if (pp > static_cast<int>(UnitLayers(ctx.model, encoder).size()) ||
            pp > static_cast<int>(UnitLayers(ctx.model, llm).size())) {
          continue;
        }
        search.Try([&](Recompute r) {
          Plan plan = EmptyPlan(ctx, "dip", g);
          plan.units.push_back(
              MakeUnit(profiled, "encoder", encoder, 0, g, 0, dp, pp, K, ScheduleKind::kGpipe, r, Balance::kTime));
          plan.units.push_back(
              MakeUnit(profiled, "llm", llm, 0, g, 1, dp, pp, K, ScheduleKind::kOneFOneB, r, Balance::kTime));
          return plan;
        });
      }
    }
  };
  search.Run(grid);
  return search.Finish(
      "dip: the encoder and the LLM each pipelined over every group of a replica, co-located in two "
      "phases (encoder GPipe, then LLM 1F1B), stages balanced on one microbatch; DP x TP x "
      "recomputation",
      [](const Plan& p) {
        const Unit& e = p.units[0];
        return fmt::format("encoder+llm co-located tp{} pp{} dp{} m{}, recompute={}", e.tp, e.pipelines[0].pp,
                           e.num_replicas(), e.pipelines[0].microbatches, RecomputeName(e.recompute));
      });
}

}  // namespace loom
