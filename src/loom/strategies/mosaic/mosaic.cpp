#include "loom/strategies/mosaic/mosaic.h"

#include <fmt/format.h>

#include <algorithm>

#include "loom/cost/cost_model.h"
#include "loom/error.h"
#include "loom/human_bytes.h"
#include "loom/strategies/plan_builders.h"

namespace loom {

using namespace mosaic;

MosaicSolution SolveMosaic(const StrategyContext& ctx, const MosaicOptions& options) {
  MosaicSolution sol;
  SurfaceOptions so;
  so.granularity = options.granularity;
  so.whole_gpus = options.whole_gpus;
  // Mosaic places modules on whole GPUs with DP only (no TP or PP: edge-grade
  // models, §3.5): one GPU per group.
  const double mem = static_cast<double>(ctx.cluster.gpu.mem_bytes);
  // The least recomputation under which every module fits some GPU block and
  // a mapping fits with the other modules' reserve (StageEvaluator::ReserveOthers),
  // else without it (the simulator then judges the plan's real peak).
  const SmPartitionRules rules = PartitionRules(ctx.cluster);
  const SmSharing sharing = ctx.cluster.cost_model ? ctx.cluster.cost_model->sm_sharing() : SmSharing{};
  const auto deps = ModuleDeps(ctx.model);
  for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
    so.recompute = r;
    sol.surfaces = SampleSurfaces(ctx, so);
    sol.recompute = r;
    std::string too_big;
    for (const auto& s : sol.surfaces) {
      double least = 1e300;
      for (const auto& p : s.points) least = std::min(least, p.mem_bytes);
      if (least > mem && too_big.empty()) {
        too_big = fmt::format("strategy mosaic: module {} needs {} per GPU even with DP over {} GPUs and full "
                              "recomputation, more than the {} of a {} (Mosaic keeps every module whole on its GPUs: "
                              "no TP or PP)",
                              s.module, HumanBytes(least), ctx.cluster.num_gpus(), HumanBytes(mem), ctx.cluster.gpu.name);
      }
    }
    if (!too_big.empty()) {
      if (r == Recompute::kFull) throw Error(too_big);
      continue;
    }
    for (bool reserve : {true, false}) {
      StageEvaluator eval(sol.surfaces, ctx.cluster.num_gpus(), mem, rules, sharing, options.stage);
      eval.ReserveOthers(reserve);
      sol.mapping = SolveGahc(deps, eval, options.mapping);
      sol.evaluations += eval.evaluations();
      sol.milp_solves += eval.milp_solves();
      if (sol.mapping.feasible()) break;
    }
    if (sol.mapping.feasible()) break;
  }
  if (!sol.mapping.feasible()) {
    throw Error(fmt::format("strategy mosaic: no stage mapping fits {}: every module keeps its state on each GPU it "
                            "uses for the whole iteration (no TP or PP), even with full recomputation",
                            ctx.cluster.name));
  }

  Plan plan = EmptyPlan(ctx, options.whole_gpus ? "spindle" : "mosaic", 1);
  for (int phase = 0; phase < static_cast<int>(sol.mapping.stages.size()); ++phase) {
    for (const auto& p : sol.mapping.stages[phase].result.placements) {
      const std::string& name = ctx.model.modules[p.module].name;
      Unit u = MakeUnit(ctx, name, {name}, p.first_gpu, 1, phase, p.dp, 1, 1, ScheduleKind::kGpipe,
                        sol.recompute, Balance::kTime);
      u.sm_fraction = static_cast<double>(p.sms) / rules.sm_count;
      plan.units.push_back(std::move(u));
    }
  }
  // Units in model order (the plan format lists modules' units as the model does).
  std::stable_sort(plan.units.begin(), plan.units.end(), [&](const Unit& a, const Unit& b) {
    return ctx.model.FindModule(a.modules[0]) < ctx.model.FindModule(b.modules[0]);
  });
  plan.searched = fmt::format(
      "GAHC over stages (Alg. 1), StageEval by binary search + first fit / CBC ({}, aligned GPU blocks, memory, host "
      "launch floors); {} stage evaluations, {} CBC solves, {} pairs, {} pruned, {} refinements",
      options.whole_gpus ? std::string("whole GPUs: waves of modules on disjoint GPU sets")
                         : fmt::format("SM quotas at {:.0f}% granularity", options.granularity * 100),
      sol.evaluations, sol.milp_solves, sol.mapping.pairs_visited, sol.mapping.pruned, sol.mapping.refinements);
  sol.plan = std::move(plan);
  return sol;
}

namespace {

std::string Describe(const Plan& p) {
  std::string s;
  int phase = -1;
  for (int q = 0;; ++q) {
    std::string part;
    for (const auto& u : p.units) {
      if (u.phase != q) continue;
      part += fmt::format("{}{} d{} {:.0f}%", part.empty() ? "" : ", ", u.name, u.num_replicas(), u.sm_fraction * 100);
    }
    if (part.empty()) break;
    s += (phase < 0 ? "" : " | ") + part;
    phase = q;
  }
  return s;
}

StrategyResult Run(const StrategyContext& ctx, const MosaicOptions& options, const std::string& name) {
  MosaicSolution sol = SolveMosaic(ctx, options);
  sol.plan.strategy = name;
  CandidateSearch search(ctx, name);
  search.Try([&](Recompute r) {
    Plan p = sol.plan;
    for (auto& u : p.units) u.recompute = std::max(r, sol.recompute);
    return p;
  });
  return search.Finish(sol.plan.searched, Describe);
}

}  // namespace

StrategyResult MosaicStrategy(const StrategyContext& ctx) { return Run(ctx, {}, "mosaic"); }

// The §5.3 ablations and Spindle: Mosaic's options with one thing changed.
static MosaicOptions With(void (*change)(MosaicOptions&)) {
  MosaicOptions o;
  change(o);
  return o;
}

StrategyResult MosaicNoInterferenceStrategy(const StrategyContext& ctx) {
  return Run(ctx, With([](MosaicOptions& o) { o.stage.interference = false; }), "mosaic-nointerference");
}
StrategyResult MosaicAdditiveStrategy(const StrategyContext& ctx) {
  return Run(ctx, With([](MosaicOptions& o) { o.stage.additive_only = true; }), "mosaic-additive");
}
StrategyResult MosaicNoCacheStrategy(const StrategyContext& ctx) {
  return Run(ctx, With([](MosaicOptions& o) { o.stage.cache = false; }), "mosaic-nocache");
}
StrategyResult MosaicNoPruneStrategy(const StrategyContext& ctx) {
  return Run(ctx, With([](MosaicOptions& o) { o.mapping.early_prune = false; }), "mosaic-noprune");
}
StrategyResult MosaicGranularity30Strategy(const StrategyContext& ctx) {
  return Run(ctx, With([](MosaicOptions& o) { o.granularity = 0.3; }), "mosaic-g30");
}
StrategyResult MosaicGranularity20Strategy(const StrategyContext& ctx) {
  return Run(ctx, With([](MosaicOptions& o) { o.granularity = 0.2; }), "mosaic-g20");
}
StrategyResult MosaicGranularity5Strategy(const StrategyContext& ctx) {
  return Run(ctx, With([](MosaicOptions& o) { o.granularity = 0.05; }), "mosaic-g5");
}
StrategyResult SpindleStrategy(const StrategyContext& ctx) {
  return Run(ctx, With([](MosaicOptions& o) { o.whole_gpus = true; }), "spindle");
}

}  // namespace loom
