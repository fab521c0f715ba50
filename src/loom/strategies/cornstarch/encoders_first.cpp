// Cornstarch's baseline Megatron* (seed 004 §3.5): Megatron-LM's grid with
// every encoder and projector pinned to the first pipeline stage and the LLM's
// layers balanced (by parameters, as Megatron-LM does) over the other pp - 1.
// The thesis compares Cornstarch against this layout, not against Loom's
// `megatron`, which may pick pure data parallelism.
#include <fmt/format.h>

#include <algorithm>

#include "loom/error.h"
#include "loom/pipeline/partition.h"
#include "loom/strategies/cornstarch/cornstarch.h"
#include "loom/strategies/search/candidate_search.h"
#include "loom/strategies/search/module_waves.h"
#include "loom/strategies/search/pipeline_grid.h"

namespace loom {

StrategyResult EncodersFirstStrategy(const StrategyContext& ctx) {
  CandidateSearch search(ctx, "megatron-encoders-first");
  const ModuleWaves waves = SplitWaves(ctx.model);
  std::vector<std::string> encoders, llm = waves.backbone;
  for (const auto& b : waves.upstream_branches) encoders.insert(encoders.end(), b.begin(), b.end());
  llm.insert(llm.end(), waves.downstream.begin(), waves.downstream.end());
  if (encoders.empty() || llm.empty()) {
    throw NotApplicable(
        fmt::format("megatron-encoders-first: model {} needs encoders before a backbone", ctx.model.name));
  }
  // The model's execution order, which puts every encoder before the LLM.
  std::vector<std::string> order;
  for (const auto& m : ctx.model.modules) order.push_back(m.name);
  for (size_t i = 0; i < encoders.size(); ++i) {
    if (std::find(encoders.begin(), encoders.end(), order[i]) == encoders.end()) {
      throw Error(
          fmt::format("megatron-encoders-first: model {} runs module {} among its encoders", ctx.model.name, order[i]));
    }
  }
  const auto layers = UnitLayers(ctx.model, order);
  const auto llm_layers = UnitLayers(ctx.model, llm);
  const int first = static_cast<int>(layers.size() - llm_layers.size());
  const int64_t B = ctx.workload.global_batch;
  for (int tp : TpChoices(ctx.cluster)) {
    const int groups = ctx.cluster.num_gpus() / tp;
    for (int pp : Divisors(groups)) {
      if (pp < 2 || pp - 1 > static_cast<int>(llm_layers.size())) continue;
      const int dp = groups / pp;
      if (B % dp != 0) continue;
      const Partition rest = MinMaxPartition(LayerWeights(ctx, llm_layers, Balance::kParams, tp), pp - 1);
      Partition part;
      part.begin = {0};
      for (int b : rest.begin) part.begin.push_back(first + b);
      part.stage_cost.assign(pp, 0.0);
      for (int m : Divisors(B / dp)) {
        if (m < pp || m > 64) continue;
        search.Try([&](Recompute r) {
          Plan plan = EmptyPlan(ctx, "megatron-encoders-first", tp);
          Unit u = MakeUnit(ctx, "all", order, 0, tp, 0, dp, pp, m, ScheduleKind::kOneFOneB, r, Balance::kParams);
          u.pipelines[0].stages = StagesFromPartition(ctx.model, layers, part, pp);  // the encoders pinned first
          plan.units.push_back(std::move(u));
          return plan;
        });
      }
    }
  }
  return search.Finish(
      "TP x PP (>= 2) x microbatches x recompute; the encoders and projectors on the first stage, "
      "the LLM balanced by parameters over the rest",
      [](const Plan& p) { return DescribeUnit(p.units[0], p.group_gpus); });
}

}  // namespace loom
