// Optimus, coarse-grained bubble scheduling only (as PipeWeaver §8 runs it):
// the backbone runs a Megatron-LM pipeline (TP, PP, DP, 1F1B); the encoders
// run data parallel on the same GPUs, every encoder forward scheduled before
// the backbone's pipeline on each GPU and every encoder backward after it, so
// encoders add no pipeline stages and fill the warm-up and cool-down bubbles
// only where the data allows. Modules downstream of the backbone (Optimus has
// no generator support) stay in the backbone's pipeline. Searched: TP, PP, DP,
// microbatches and recomputation. Optimus (§4) gives the encoders a
// parallelism of their own, TP 1 included; PipeWeaver §8 implemented it inside
// PipeWeaver, on one Megatron-LM grid, so `optimus-shared-tp` keeps the
// encoders at the backbone's TP (docs/results/pipeweaver.md, "Headline
// comparisons", measures what that choice is worth).
#include <algorithm>

#include "loom/strategies/baselines/baselines.h"
#include "loom/strategies/plan_builders.h"
#include "loom/strategies/search/candidate_search.h"
#include "loom/strategies/search/module_waves.h"
#include "loom/strategies/search/pipeline_grid.h"

namespace loom {

namespace {

StrategyResult SearchOptimus(const StrategyContext& ctx, const std::string& name, bool encoders_own_tp) {
  CandidateSearch search(ctx, name);
  const ModuleWaves waves = SplitWaves(ctx.model);
  std::vector<std::string> encoders, backbone;
  for (const auto& b : waves.upstream_branches) encoders.insert(encoders.end(), b.begin(), b.end());
  backbone = waves.backbone;
  backbone.insert(backbone.end(), waves.downstream.begin(), waves.downstream.end());
  auto order = [&](std::vector<std::string>& v) {
    std::sort(v.begin(), v.end(),
              [&](const auto& a, const auto& b) { return ctx.model.FindModule(a) < ctx.model.FindModule(b); });
  };
  order(encoders);
  order(backbone);
  const int n = ctx.cluster.num_gpus();
  int backbone_layers = 0;
  for (const auto& m : backbone)
    backbone_layers += static_cast<int>(ctx.model.modules[ctx.model.FindModule(m)].layers.size());
  auto grid = [&] {
    ForEachPipelineGrid(ctx, backbone_layers, [&](int tp, int pp, int dp, int m) {
      // Encoders: data parallel with TP 1 or the backbone's, one replica per
      // group; or pipelined over the backbone's stages when they are too big.
      // enc: 0 data parallel at TP 1; 1 data parallel at the backbone's TP;
      // 2 pipelined over the backbone's stages at its TP.
      for (int enc : {0, 1, 2}) {
        if (encoders.empty() && enc > 0) break;
        if (enc == 0 && !encoders_own_tp && !encoders.empty() && tp > 1) continue;
        if ((enc == 1 && tp == 1) || (enc == 2 && pp == 1)) continue;
        for (Balance balance : {Balance::kTime, Balance::kParams}) {
          search.Try([&](Recompute r) {
            if (encoders.empty()) {
              return SingleUnitPlan(ctx, name, tp, pp, dp, 1, m, ScheduleKind::kOneFOneB, r, balance, 1);
            }
            Plan plan = EmptyPlan(ctx, name, tp);
            // Phase 0 on every group: all encoder forwards before the backbone's
            // pipeline, all encoder backwards after it.
            plan.units.push_back(
                enc == 2 ? MakeUnit(ctx, "encoders", encoders, 0, tp, 0, dp, pp, m, ScheduleKind::kGpipe, r, balance)
                         : MakeUnit(ctx, "encoders", encoders, 0, enc == 0 ? 1 : tp, 0, n / tp, 1, m,
                                    ScheduleKind::kGpipe, r, balance));
            plan.units.push_back(
                MakeUnit(ctx, "backbone", backbone, 0, tp, 1, dp, pp, m, ScheduleKind::kOneFOneB, r, balance));
            return plan;
          });
        }
      }
    });
  };
  search.Run(grid);
  return search.Finish(
      "backbone tp x pp x dp x microbatches x recompute (1F1B); encoders data parallel on all "
      "GPUs, forwards before and backwards after the backbone pipeline",
      [](const Plan& p) {
        if (p.units.size() == 1) return DescribeUnit(p.units[0], p.group_gpus);
        return "backbone " + DescribeUnit(p.units[1], p.group_gpus) + "; encoders " +
               DescribeUnit(p.units[0], p.group_gpus) + " before/after";
      });
}

}  // namespace

StrategyResult OptimusStrategy(const StrategyContext& ctx) { return SearchOptimus(ctx, "optimus", true); }

StrategyResult OptimusSharedTpStrategy(const StrategyContext& ctx) {
  return SearchOptimus(ctx, "optimus-shared-tp", false);
}

}  // namespace loom
