// Hand-built plans of the five shapes on small zoo models, shared by the plan
// and plan-simulation tests.
#pragma once

#include "loom/data/sample_source.h"
#include "loom/plan/plan.h"
#include "loom/spec/cluster.h"
#include "loom/spec/model.h"
#include "loom/spec/workload.h"
#include "loom/strategies/plan_builders.h"

namespace loom::test {

struct Fixture {
  Model model = LoadModel("vlm-s");
  Cluster cluster = MakeCluster("h800", 2, 8);
  Workload workload = [] {
    Workload w = LoadWorkload("obelics");
    w.global_batch = 16;
    return w;
  }();
  Batch batch = DrawBatch(workload, 0);
  StrategyContext ctx() const { return {model, cluster, workload, batch, {}}; }
};

// Shape 1: Megatron layout, tp 4, pp 2, dp 2.
inline Plan MegatronShape(const Fixture& f, int dp = 2, int pp = 2, int m = 4) {
  return SingleUnitPlan(f.ctx(), "megatron", 4, pp, dp, 1, m, ScheduleKind::kOneFOneB, Recompute::kFull,
                        Balance::kParams, 1);
}

// Shape 2: vision+projector on groups 0-1 (dp 2), llm on groups 2-3 (tp 4, dp 2), joined by brokers.
inline Plan DisaggregatedShape(const Fixture& f) {
  Plan p = EmptyPlan(f.ctx(), "mmscale-like", 4);
  p.units.push_back(MakeUnit(f.ctx(), "encoder", {"vision", "projector"}, 0, 4, 0, 2, 1, 4, ScheduleKind::kOneFOneB,
                             Recompute::kFull, Balance::kParams));
  p.units.push_back(
      MakeUnit(f.ctx(), "llm", {"llm"}, 2, 4, 0, 2, 1, 4, ScheduleKind::kOneFOneB, Recompute::kFull, Balance::kParams));
  p.brokers.push_back({"encoder", "llm", 2});
  return p;
}

// Shape 3: encoder at half the SMs of groups 0-3 in phase 0, llm on all groups in phase 1.
inline Plan TemporalShape(const Fixture& f, double sm_fraction) {
  Plan p = EmptyPlan(f.ctx(), "mosaic-like", 4);
  p.units.push_back(MakeUnit(f.ctx(), "encoder", {"vision", "projector"}, 0, 4, 0, 4, 1, 4, ScheduleKind::kGpipe,
                             Recompute::kFull, Balance::kParams));
  p.units[0].sm_fraction = sm_fraction;
  p.units.push_back(
      MakeUnit(f.ctx(), "llm", {"llm"}, 0, 4, 1, 2, 2, 4, ScheduleKind::kOneFOneB, Recompute::kFull, Balance::kParams));
  return p;
}

// Shape 4: one unit, two pipeline templates (pp 2 and pp 1, one replica each... plus one more pp 1).
inline Plan HeterogeneousShape(const Fixture& f) {
  Plan p = MegatronShape(f, 1, 2, 4);
  p.strategy = "oobleck-like";
  PipelineSpec one = MakeUnit(f.ctx(), "x", p.units[0].modules, 0, 4, 0, 2, 1, 2, ScheduleKind::kOneFOneB,
                              Recompute::kFull, Balance::kParams)
                         .pipelines[0];
  p.units[0].pipelines.push_back(one);  // 2 replicas of pp 1, 2 microbatches each: 4 + 4 = 8 slots of 2 samples
  return p;
}

}  // namespace loom::test
