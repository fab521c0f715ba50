// `--export megatron` in current Megatron-LM's terms (issue 22): the exact
// stage contents as --pipeline-model-parallel-layout (counted here from the
// plan's stages), interleaving only across ranks, freezing flags, the MIMO
// example's rank grids for an encoder and an LLM on their own GPUs, and a
// reason for everything else.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "../plan/plan_test_util.h"
#include "loom/export/megatron_args.h"
#include "loom/strategies/baselines/megatron_config.h"
#include "test_util.h"

namespace loom {
namespace {

// The layout string of a plan's stages, counted from its layer ranges: the
// backbone's embedding E, each transformer layer t, the head L.
std::string CountedLayout(const Plan& plan, const Model& model) {
  std::string out;
  const auto& stages = plan.units[0].pipelines[0].stages;
  for (size_t s = 0; s < stages.size(); ++s) {
    std::string part;
    int t = 0;
    for (const auto& r : stages[s].layers) {
      const Module& m = model.modules[model.FindModule(r.module)];
      if (m.role != ModuleRole::kBackbone) continue;
      for (int l = r.begin; l < r.end; ++l) {
        if (m.layers[l].kind == LayerKind::kTransformer) {
          ++t;
          continue;
        }
        if (t > 0) part += t == 1 ? "t" : fmt::format("t*{}", t);
        t = 0;
        part += m.layers[l].kind == LayerKind::kEmbedding ? "E" : "L";
      }
    }
    if (t > 0) part += t == 1 ? "t" : fmt::format("t*{}", t);
    out += (s == 0 ? "" : "|") + part;
  }
  return out;
}

TEST(MegatronExport, LayoutHoldsThePlansExactStagesWithInterleaving) {
  const Model model = LoadModel("llama3-8b");
  Workload w = LoadWorkload("text");
  w.global_batch = 16;
  const Cluster c = MakeCluster("h100", 1, 8);
  const Batch batch = DrawBatch(w, 0);
  ParallelConfig cfg;
  cfg.tp = 2;
  cfg.pp = 2;
  cfg.dp = 2;
  cfg.vpp = 3;
  cfg.microbatches = 4;
  cfg.schedule = ScheduleKind::kInterleaved;
  const Plan plan = MegatronConfigPlan({model, c, w, batch, {}}, cfg);
  const MegatronExport e = ExportMegatron(plan, model);
  ASSERT_TRUE(e.expressible) << e.notes;
  const std::string layout = CountedLayout(plan, model);
  EXPECT_EQ(std::count(layout.begin(), layout.end(), '|'), 5);  // pp x vpp = 6 stages
  EXPECT_EQ(layout.front(), 'E');
  EXPECT_EQ(layout.back(), 'L');
  EXPECT_NE(e.args.find("--pipeline-model-parallel-layout \"" + layout + "\""), std::string::npos) << e.args;
  EXPECT_NE(e.args.find("--tensor-model-parallel-size 2"), std::string::npos);
  EXPECT_NE(e.args.find("--pipeline-model-parallel-size 2"), std::string::npos);
  EXPECT_NE(e.args.find("--micro-batch-size 2"), std::string::npos);  // 16 / (dp 2 x 4 microbatches)
  // The removed flags are gone; so is the old per-model layer average.
  EXPECT_EQ(e.args.find("num-layers-per-virtual-pipeline-stage"), std::string::npos);
  EXPECT_EQ(e.args.find("--encoder-"), std::string::npos);
  EXPECT_NE(e.notes.find("core 0.13"), std::string::npos);
}

TEST(MegatronExport, InterleavingOnOneRankAndEncoderOnlyStagesAreRefused) {
  test::Fixture f;
  // vlm-s on PipeWeaver's shape: vpp 2 on a single pipeline rank.
  Plan one_rank =
      SingleUnitPlan(f.ctx(), "pw", 4, 1, 4, 2, 4, ScheduleKind::kInterleaved, Recompute::kFull, Balance::kParams, 1);
  const MegatronExport e1 = ExportMegatron(one_rank, f.model);
  EXPECT_FALSE(e1.expressible);
  EXPECT_NE(e1.notes.find("interleaves 2 chunks on a single pipeline rank"), std::string::npos) << e1.notes;
  // `loom simulate`'s flags refuse it as Megatron-LM does.
  ParallelConfig cfg;
  cfg.tp = 4;
  cfg.dp = 4;
  cfg.vpp = 2;
  cfg.microbatches = 4;
  cfg.schedule = ScheduleKind::kInterleaved;
  test::ExpectError([&] { cfg.Validate(f.model, f.cluster, f.workload); }, {"--vpp 2 needs --pp >= 2"});
  // pp 4 balanced by parameters: the ViT fills the first stages on its own.
  Plan encoder_stages =
      SingleUnitPlan(f.ctx(), "m", 4, 4, 1, 1, 4, ScheduleKind::kOneFOneB, Recompute::kFull, Balance::kParams, 1);
  const std::string counted = CountedLayout(encoder_stages, f.model);
  ASSERT_EQ(counted.substr(0, 1), "|") << counted;  // stage 0 holds no LLM layer
  const MegatronExport e2 = ExportMegatron(encoder_stages, f.model);
  EXPECT_FALSE(e2.expressible);
  EXPECT_NE(e2.notes.find("hold no LLM layer (encoders only)"), std::string::npos) << e2.notes;
}

TEST(MegatronExport, EncoderAndLlmOnTheirOwnGpusAreTheMimoGrids) {
  test::Fixture f;
  const MegatronExport e = ExportMegatron(test::DisaggregatedShape(f), f.model);
  ASSERT_TRUE(e.expressible) << e.notes;
  // Encoder on groups 0-1 (tp 4, 2 replicas), LLM from group 2 (GPU 8), tp 4, pp 1, 2 replicas.
  for (const char* arg : {"--encoder-tp 4", "--encoder-dp 2", "--llm-offset 8", "--llm-tp 4", "--llm-pp 1",
                          "--llm-dp 2", "--micro-batch-size 2", "--global-batch-size 16"}) {
    EXPECT_NE(e.args.find(arg), std::string::npos) << arg << "\n" << e.args;
  }
  EXPECT_NE(e.notes.find("MIMO example"), std::string::npos);
  EXPECT_NE(e.notes.find("the LLM on GPUs 8..15"), std::string::npos) << e.notes;
}

TEST(MegatronExport, FrozenModulesBecomeFreezeFlags) {
  test::Fixture f;
  Model frozen = f.model;
  for (auto& m : frozen.modules) {
    if (m.role == ModuleRole::kBackbone || m.name == "vision") {
      for (auto& l : m.layers) l.frozen = true;
    }
  }
  Plan p = SingleUnitPlan(f.ctx(), "m", 4, 1, 4, 1, 4, ScheduleKind::kOneFOneB, Recompute::kFull, Balance::kParams, 1);
  const MegatronExport e = ExportMegatron(p, frozen);
  ASSERT_TRUE(e.expressible) << e.notes;
  EXPECT_NE(e.args.find("--freeze-LM"), std::string::npos) << e.args;
  EXPECT_NE(e.args.find("--freeze-ViT"), std::string::npos) << e.args;
}

}  // namespace
}  // namespace loom
