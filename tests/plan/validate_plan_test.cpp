#include <gtest/gtest.h>

#include "loom/plan/validate_plan.h"
#include "plan/plan_test_util.h"
#include "test_util.h"

namespace loom {
namespace {

bool Has(const std::vector<std::string>& v, const std::string& frag) {
  for (const auto& s : v) {
    if (s.find(frag) != std::string::npos) return true;
  }
  return false;
}

TEST(ValidatePlan, ValidShapesPass) {
  test::Fixture f;
  for (const Plan& p : {test::MegatronShape(f), test::DisaggregatedShape(f), test::TemporalShape(f, 1.0),
                        test::HeterogeneousShape(f)}) {
    EXPECT_TRUE(PlanViolations(p, f.model, f.cluster, f.workload).empty())
        << p.strategy << ": " << PlanViolations(p, f.model, f.cluster, f.workload).front();
  }
}

TEST(ValidatePlan, ReportsEveryViolationWithItsNumbers) {
  test::Fixture f;
  Plan p = test::MegatronShape(f);
  p.units[0].tp = 3;                     // does not divide the group of 4
  p.units[0].pipelines[0].replicas = 5;  // 5 x 2 groups of 4 = 40 GPUs > 16
  p.global_batch = 17;                   // != workload's 16
  auto v = PlanViolations(p, f.model, f.cluster, f.workload);
  EXPECT_TRUE(Has(v, "tp (3) x cp (1) = 3 must divide group_gpus (4)"));
  EXPECT_TRUE(Has(v, "occupies groups 0..9 but the cluster has 4 groups of 4 GPUs (16 GPUs)"));
  EXPECT_TRUE(Has(v, "global_batch is 17; the workload's is 16"));
  test::ExpectError([&] { ValidatePlan(p, f.model, f.cluster, f.workload, "my.json"); },
                    {"my.json: invalid plan", "violations", "tp (3)", "groups 0..9", "global_batch is 17"});
}

TEST(ValidatePlan, GroupsMustStayInsideANode) {
  test::Fixture f;
  Plan p = test::MegatronShape(f);
  p.group_gpus = 16;
  EXPECT_TRUE(Has(PlanViolations(p, f.model, f.cluster, f.workload), "group_gpus is 16; it must divide the 8"));
}

TEST(ValidatePlan, SmFractionsPerGpuSumToAtMostOne) {
  test::Fixture f;
  Plan p = test::TemporalShape(f, 0.6);
  Unit twin = p.units[0];  // a second encoder unit on the same groups in the same phase
  twin.name = "encoder2";
  twin.sm_fraction = 0.5;
  twin.modules = {};
  p.units.push_back(twin);
  auto v = PlanViolations(p, f.model, f.cluster, f.workload);
  EXPECT_TRUE(Has(v, "phase 0, GPU group 0 (GPUs 0..3): SM fractions sum to 1.1, 0.1 over 1")) << v.front();
  p.units[0].sm_fraction = 0;
  EXPECT_TRUE(Has(PlanViolations(p, f.model, f.cluster, f.workload), "sm_fraction is 0; it must be in (0, 1]"));
}

TEST(ValidatePlan, LayersCoveredOnceInOrder) {
  test::Fixture f;
  Plan p = test::MegatronShape(f);
  p.units[0].pipelines[0].stages[1].layers.back().end -= 1;  // drop the last llm layer
  EXPECT_TRUE(Has(PlanViolations(p, f.model, f.cluster, f.workload), "they must hold the 99 layers"));
  p = test::MegatronShape(f);
  p.units[0].modules.pop_back();  // llm in no unit
  EXPECT_TRUE(Has(PlanViolations(p, f.model, f.cluster, f.workload), "module llm is placed in 0 units"));
}

TEST(ValidatePlan, SchedulesMustMatchTheShape) {
  test::Fixture f;
  Plan p = test::TemporalShape(f, 1.0);
  p.units[0].pipelines[0].schedule =
      ScheduleKind::kOneFOneB;  // a phase-0 unit sharing GPUs must run all forwards first
  EXPECT_TRUE(Has(PlanViolations(p, f.model, f.cluster, f.workload), "must use the gpipe schedule"));
  p = SingleUnitPlan(f.ctx(), "megatron", 4, 2, 2, 2, 4, ScheduleKind::kInterleaved, Recompute::kFull, Balance::kParams,
                     1);
  EXPECT_TRUE(PlanViolations(p, f.model, f.cluster, f.workload).empty());
  p.units[0].pipelines[0].microbatches = 3;
  p.global_batch = 16;
  auto v = PlanViolations(p, f.model, f.cluster, f.workload);
  EXPECT_TRUE(Has(v, "needs microbatches (3) divisible by pp (2)"));
  EXPECT_TRUE(Has(v, "global batch (16) does not split into 3 equal microbatches"));
  // One stage a rank: Megatron's interleaved warm-up there is 1F1B's doubled
  // (third audit J067); the plan is refused, naming what to use.
  p = test::MegatronShape(f);
  p.units[0].pipelines[0].schedule = ScheduleKind::kInterleaved;
  EXPECT_TRUE(Has(PlanViolations(p, f.model, f.cluster, f.workload),
                  "the interleaved schedule needs 2 or more stages per rank (vpp, --vpp); with one it is 1F1B with "
                  "twice the warm-up: use 1f1b"));
}

TEST(ValidatePlan, EveryReplicaNeedsSamples) {
  test::Fixture f;
  Plan p = test::MegatronShape(f, 2, 2, 16);  // 16 microbatches of 1 sample over 2 replicas
  EXPECT_TRUE(Has(PlanViolations(p, f.model, f.cluster, f.workload),
                  "2 data-parallel replicas but a microbatch has only 1 samples"));
}

}  // namespace
}  // namespace loom
