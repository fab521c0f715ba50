// Every baseline produces a valid plan that fits, on every zoo composition
// whose model fits its cluster (issue 4's "done when"), and the strategies
// that schedule each batch give schedules that validate, simulate and fit.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdio>

#include "loom/cost/module_summary.h"
#include "loom/data/sample_source.h"
#include "loom/error.h"
#include "loom/plan/validate_plan.h"
#include "loom/sim/plan_run.h"
#include "loom/spec/zoo.h"
#include "loom/strategies/search/module_waves.h"
#include "loom/strategies/strategy.h"

namespace loom {
namespace {

// A cluster of 8-GPU H100 nodes holding the model's training state about
// 2.5 times over, and one sample per GPU.
struct ZooSetup {
  Cluster cluster;
  Workload workload;
};

ZooSetup SetupFor(const Model& model) {
  const double state_bytes = 18.0 * static_cast<double>(ModelParams(model));
  const int nodes = std::max(1, static_cast<int>(std::ceil(state_bytes * 2.5 / 80e9 / 8)));
  ZooSetup s{MakeCluster("h100", nodes, 8), DefaultWorkload(model)};
  s.workload.global_batch = s.cluster.num_gpus();
  return s;
}

// One CTest per zoo model (the whole zoo in one test took 1094 s of the
// sanitizer pass's 1151 s; per model, CTest spreads it over the cores).
class ZooBaselines : public ::testing::TestWithParam<std::string> {};

// Models whose samples overflow every Megatron-LM layout at one sample per
// GPU: an 8192-token OBELICS sample with ViT-22B over every image.
bool TooBigAtOneSamplePerGpu(const std::string& name) { return name == "vlm-l" || name == "vlm-xl"; }
// Models whose whole sample is too big for one GPU without tensor
// parallelism: those, and ViT-22B alone on OBELICS (51567 tokens a sample,
// whose MLP backward alone holds 7.6 GB: 3 bf16 values of its 24576-wide
// hidden layer per token, cost/layer_work.h BackwardWorkingBytes).
bool WholeSampleTooBigWithoutTp(const std::string& name) { return TooBigAtOneSamplePerGpu(name) || name == "vit-22b"; }

TEST_P(ZooBaselines, EveryBaselineFindsAValidPlanWhenTheModelFits) {
  const std::string name = GetParam();
  Model model = LoadModel(name);
  ZooSetup s = SetupFor(model);
  Batch batch = DrawBatch(s.workload, 0);
  StrategyContext ctx{model, s.cluster, s.workload, batch, {}};
  ctx.schedule_rollouts = 50;  // per-batch searches (pipeweaver) stop early; the result is still checked
  StrategyResult megatron;
  try {
    megatron = RunStrategy("megatron", ctx);
  } catch (const Error& e) {
    EXPECT_TRUE(TooBigAtOneSamplePerGpu(name)) << "megatron found no plan: " << e.what();
    GTEST_SKIP() << name << " on " << s.cluster.name << ": the model does not fit (megatron finds no plan)";
  }
  // Entrain and DIP balance an encoder against an LLM: exactly the models
  // with a module upstream of the backbone are planned by them.
  const bool has_encoder = !SplitWaves(model).upstream_branches.empty();
  for (const auto& strategy : StrategyNames()) {
    SCOPED_TRACE(name + " / " + strategy + " on " + s.cluster.name);
    StrategyResult r;
    try {
      r = strategy == "megatron" ? megatron : RunStrategy(strategy, ctx);
    } catch (const Error& e) {
      // Pure data parallelism holds a whole sample's activations on one GPU:
      // vlm-l, vlm-xl and vit-22b cannot fit, whatever the sharding. Oobleck's
      // stages are data parallel inside too (no TP): vlm-xl's 148 layers fit
      // no template; on vlm-l every template it sizes overflows once the
      // ViT-22B layers' backward working sets are priced (its template planner
      // sizes stages by kept activations alone: docs/cost-model.md "Memory",
      // a known gap, so a template that would fit may be missed).
      // Nothing else may fail.
      const std::string what = e.what();
      const bool whole_sample_too_big =
          (strategy == "fsdp" && WholeSampleTooBigWithoutTp(name) &&
           what.find("do not fit in memory") != std::string::npos) ||
          (strategy == "oobleck" && name == "vlm-xl" && what.find("fits in memory") != std::string::npos) ||
          (strategy == "oobleck" && name == "vlm-l" && what.find("do not fit in memory") != std::string::npos);
      const bool no_encoder = (strategy == "entrain" || strategy == "dip") && !has_encoder &&
                              what.find("no module upstream of its backbone") != std::string::npos;
      // Mosaic and Spindle plan every model Megatron-LM does (slots of
      // nodes with PP when no slot of a node holds a mapping).
      if (!whole_sample_too_big && !no_encoder) ADD_FAILURE() << e.what();
      continue;
    }
    EXPECT_EQ(r.plan.strategy, strategy);
    if (strategy == "entrain" || strategy == "dip") EXPECT_TRUE(has_encoder);
    EXPECT_TRUE(PlanViolations(r.plan, model, s.cluster, s.workload).empty());
    EXPECT_GT(r.candidates, 0);
    EXPECT_FALSE(r.plan.searched.empty());
    // Per-batch schedules are validated (pipeline validator) and simulated too.
    IterationSchedule it;
    const bool per_batch = SchedulesBatches(strategy);
    if (per_batch) it = ScheduleBatch(strategy, ctx, r.plan, batch, 0);
    PlanRun run = RunPlan(model, s.cluster, s.workload, r.plan, batch, per_batch ? &it : nullptr);
    EXPECT_TRUE(run.memory_violations.empty()) << run.memory_violations.front();
    EXPECT_GT(run.metrics.iteration_time_s, 0);
    EXPECT_GT(run.metrics.mfu, 0);
    EXPECT_LT(run.metrics.mfu, 1);
  }
}

INSTANTIATE_TEST_SUITE_P(Zoo, ZooBaselines, ::testing::ValuesIn(ZooModelNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string id = info.param;
                           for (char& c : id) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return id;
                         });

// The zoo keeps most models plannable at one sample per GPU, and more than
// fifteen with an encoder for Entrain (what the per-model test checks each of).
TEST(Baselines, TheZooIsMostlyPlannableAndMultimodal) {
  int too_big = 0, with_encoder = 0;
  for (const auto& name : ZooModelNames()) {
    too_big += TooBigAtOneSamplePerGpu(name);
    with_encoder += !SplitWaves(LoadModel(name)).upstream_branches.empty();
  }
  EXPECT_LE(too_big, 4);
  EXPECT_GT(with_encoder, 15);
  EXPECT_LT(with_encoder, static_cast<int>(ZooModelNames().size()));
}

}  // namespace
}  // namespace loom
