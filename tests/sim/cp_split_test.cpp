// Context parallelism priced from the batch's actual attention masks
// (Unit::cp_split, cost/cp_assignment.h): OBELICS samples pack several
// documents, each with images amid its text. Under a bitfield mask
// (Cornstarch's LLM) Megatron's zigzag split of each document is not exact:
// the images' blocks are bidirectional; Cornstarch's LPT over every
// document's blocks comes close to the ideal 1/cp. Under plain causal
// document attention zigzag is exact up to block granularity.
#include <gtest/gtest.h>

#include "loom/error.h"
#include "loom/plan/compile_plan.h"
#include "loom/plan/plan_json.h"
#include "loom/sim/plan_run.h"
#include "loom/sim/price_execution.h"
#include "plan/plan_test_util.h"

namespace loom {
namespace {

Plan WithCp(const test::Fixture& f, CpSplit split) {
  Plan p = SingleUnitPlan(f.ctx(), "megatron", 4, 1, 1, 1, 4, ScheduleKind::kOneFOneB, Recompute::kFull,
                          Balance::kParams, 1);
  p.group_gpus = 8;  // tp 4 x cp 2
  p.units[0].cp = 2;
  p.units[0].cp_split = split;
  return p;
}

TEST(CpSplit, PricedFromTheMasksOfTheBatch) {
  test::Fixture f;
  const int llm = f.model.FindModule("llm");
  {
    const ExecutionPlan e = CompilePlan(f.model, f.cluster, f.workload, WithCp(f, CpSplit::kZigzag), f.batch);
    for (const auto& mb : e.replicas[0][0]) {
      EXPECT_LT(CpImbalanceOf(f.model, e.stages[0], f.batch, 0, mb.pieces)[llm], 1.01);  // causal documents
    }
  }
  f.model.modules[llm].bitfield_attention = true;
  std::vector<double> imbalance;
  for (CpSplit split : {CpSplit::kIdeal, CpSplit::kZigzag, CpSplit::kBalanced}) {
    const ExecutionPlan e = CompilePlan(f.model, f.cluster, f.workload, WithCp(f, split), f.batch);
    ASSERT_EQ(e.stages[0].cp_split, split);
    double worst = 1;
    for (const auto& mb : e.replicas[0][0]) {
      worst = std::max(worst, CpImbalanceOf(f.model, e.stages[0], f.batch, 0, mb.pieces)[llm]);
    }
    imbalance.push_back(worst);
  }
  EXPECT_EQ(imbalance[0], 1.0);
  EXPECT_GT(imbalance[1], 1.02);          // zigzag per document
  EXPECT_LT(imbalance[2], imbalance[1]);  // LPT over the mask's blocks
  EXPECT_LT(imbalance[2], 1.01);
  // Cornstarch's intra-GPU split on the H100's SMs (vlm-s' 32 heads over tp 4:
  // 8 per GPU) only shortens the balanced split's kernel, by the ratio of its
  // busiest rank's makespans (SubBlockFactor), and never below half.
  {
    const ExecutionPlan e = CompilePlan(f.model, f.cluster, f.workload, WithCp(f, CpSplit::kBalanced), f.batch);
    const int sms = f.cluster.gpu.sm_count;
    ASSERT_GT(sms, 0);
    int shorter = 0;
    for (const auto& mb : e.replicas[0][0]) {
      const double inter = CpImbalanceOf(f.model, e.stages[0], f.batch, 0, mb.pieces)[llm];
      const double both = CpImbalanceOf(f.model, e.stages[0], f.batch, sms, mb.pieces)[llm];
      EXPECT_LE(both, inter * (1 + 1e-12));
      EXPECT_GT(both, inter / 2);
      shorter += both < inter * (1 - 1e-6) ? 1 : 0;
    }
    EXPECT_GT(shorter, 0);
    const ExecutionPlan z = CompilePlan(f.model, f.cluster, f.workload, WithCp(f, CpSplit::kZigzag), f.batch);
    for (const auto& mb : z.replicas[0][0]) {  // zigzag runs whole rows: no factor
      EXPECT_EQ(CpImbalanceOf(f.model, z.stages[0], f.batch, sms, mb.pieces)[llm],
                CpImbalanceOf(f.model, z.stages[0], f.batch, 0, mb.pieces)[llm]);
    }
  }
  // The iteration follows: balanced (with its intra-GPU split) < ideal (1/cp of
  // whole-row kernels) < zigzag.
  std::vector<double> time_s;
  for (CpSplit split : {CpSplit::kIdeal, CpSplit::kZigzag, CpSplit::kBalanced}) {
    time_s.push_back(RunPlan(f.model, f.cluster, f.workload, WithCp(f, split), f.batch).metrics.iteration_time_s);
  }
  EXPECT_LT(time_s[2], time_s[0]);
  EXPECT_LT(time_s[0], time_s[1]);
}

TEST(CpSplit, JsonKeepsItAndNamesABadOne) {
  test::Fixture f;
  const Plan p = WithCp(f, CpSplit::kBalanced);
  nlohmann::json j = PlanToJson(p);
  EXPECT_EQ(j["units"][0]["cp_split"], "balanced");
  EXPECT_EQ(PlanFromJson(j, "p.json").units[0].cp_split, CpSplit::kBalanced);
  EXPECT_FALSE(PlanToJson(WithCp(f, CpSplit::kIdeal))["units"][0].contains("cp_split"));
  j["units"][0]["cp_split"] = "round-robin";
  try {
    PlanFromJson(j, "p.json");
    FAIL() << "accepted a bad cp_split";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("valid: ideal, zigzag, balanced"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace loom
