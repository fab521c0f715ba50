// Precisions (issue 13): fp32 and tf32 beside bf16 / fp16, each with its own
// peak, element size and model-state layout, checked against closed forms.
#include <gtest/gtest.h>

#include <memory>

#include "loom/cost/cost_model.h"
#include "loom/cost/device_time.h"
#include "loom/cost/layer_pricing.h"
#include "loom/cost/memory.h"
#include "loom/data/sample_source.h"
#include "loom/sim/plan_run.h"
#include "loom/spec/workload.h"
#include "loom/strategies/plan_builders.h"
#include "test_cost_model.h"
#include "test_util.h"

namespace loom {
namespace {

TEST(Precision, PeaksFollowTheDatasheet) {
  const GpuSpec& h100 = FindGpu("h100");
  EXPECT_DOUBLE_EQ(PeakFlops(h100, Precision::kBf16), 989.4e12);
  EXPECT_DOUBLE_EQ(PeakFlops(h100, Precision::kFp16), 989.4e12);
  EXPECT_DOUBLE_EQ(PeakFlops(h100, Precision::kTf32), 494.7e12);
  EXPECT_DOUBLE_EQ(PeakFlops(h100, Precision::kFp32), 66.9e12);
  EXPECT_DOUBLE_EQ(PeakFlops(FindGpu("a800"), Precision::kFp32), 19.5e12);
  for (const auto& g : BuiltinGpus()) {
    EXPECT_GT(g.peak_fp32_flops, 0) << g.name;
    EXPECT_LT(g.peak_fp32_flops, g.peak_tf32_flops) << g.name;
    EXPECT_LT(g.peak_tf32_flops, g.peak_flops) << g.name;
  }
}

TEST(Precision, ModelStateWithoutMixedPrecisionIsSixteenBytesPerParameter) {
  // Mixed precision: 2 (weights) + 4 (fp32 grads) + 12 (master, m, v) = 18 B.
  EXPECT_DOUBLE_EQ(ModelState(1e9, 0, 1, 0, Precision::kBf16).total(), 18e9);
  // fp32 / tf32: 4 (weights, the master copy) + 4 (grads) + 8 (m, v) = 16 B; frozen: 4 B.
  EXPECT_DOUBLE_EQ(ModelState(1e9, 0, 1, 0, Precision::kFp32).total(), 16e9);
  EXPECT_DOUBLE_EQ(ModelState(0, 1e9, 1, 0, Precision::kTf32).total(), 4e9);
  // ZeRO-1 over 8 shards the optimizer only.
  EXPECT_DOUBLE_EQ(ModelState(8e9, 0, 8, 1, Precision::kFp32).total(), 32e9 + 32e9 + 8e9);
}

// The roofline of a layer in each precision, written out from its work at that
// element size: max(FLOPs / (eff x peak), bytes / (eff x HBM)) per op class.
double ExpectedForward_s(const Layer& l, const TokenStats& t, const GpuSpec& gpu, Precision p) {
  const Efficiency eff;
  const LayerWork w = EstimateLayerWork(l, t, 1, ElementBytes(p));
  double s = 0;
  for (int c = 0; c < kNumOpClasses; ++c) {
    const OpWork& op = w.at(Phase::kForward, static_cast<OpClass>(c));
    s += std::max(op.flops / (eff.compute[c] * PeakFlops(gpu, p)), op.bytes / (eff.memory[c] * gpu.hbm_bytes_per_s));
  }
  return s;
}

TEST(Precision, LayerPricesUseThePrecisionsPeakAndElementSize) {
  const Cluster c = test::RooflineCluster(MakeCluster("h100", 1, 1));
  Layer l;
  l.hidden = 4096;
  l.ffn_hidden = 14336;
  l.heads = 32;
  l.kv_heads = 8;
  l.gated_mlp = true;
  l.causal = true;
  TokenStats t;
  t.tokens = 8192;
  t.sum_sq = 8192.0 * 8192;
  t.sequences = 1;
  for (Precision p : {Precision::kBf16, Precision::kTf32, Precision::kFp32}) {
    LayerParallelism par;
    par.precision = p;
    const LayerTimes lt = PriceLayer(l, t, {true, true}, c, par);
    EXPECT_NEAR(lt.forward_s, ExpectedForward_s(l, t, c.gpu, p), 1e-12) << PrecisionName(p);
    // Activations double in 32-bit, except flash attention's softmax
    // statistics, fp32 in every precision (4 B per token and head).
    par.precision = Precision::kBf16;
    const double act16 = PriceLayer(l, t, {true, true}, c, par).activation_bytes;
    const double scale = ElementBytes(p) / 2, stats = 4.0 * t.tokens * l.heads;
    EXPECT_DOUBLE_EQ(lt.activation_bytes, (act16 - stats) * scale + stats) << PrecisionName(p);
  }
  // The shipped H100 profile was measured in bf16: fp32 gets its fitted roofline, not the bf16 corrections.
  const Cluster profiled = MakeCluster("h100", 1, 1);
  LayerParallelism fp32;
  fp32.precision = Precision::kFp32;
  EXPECT_GT(PriceLayer(l, t, {true, true}, profiled, fp32).forward_s,
            10 * PriceLayer(l, t, {true, true}, profiled, {}).forward_s);
}

TEST(Precision, WorkloadsAndMfuCarryIt) {
  const std::string path = test::WriteTemp("fp32.yaml",
                                           "workload: fp32-text\nsource: {kind: text, seq_len: 1024}\nglobal_batch: 4\n"
                                           "precision: fp32\n");
  Workload w = LoadWorkload(path);
  EXPECT_EQ(w.precision, Precision::kFp32);
  test::ExpectError(
      [] { LoadWorkload(test::WriteTemp("fp8.yaml", "workload: x\nsource: {kind: text}\nprecision: fp8\n")); },
      {"fp8.yaml:3", "precision", "tf32", "fp32"});
  // MFU divides by the fp32 peak: useful FLOPs / (time x GPUs x peak) with the precision's peak.
  const Model m = LoadModel("gpt3-medium");
  const Cluster c = MakeCluster("h100", 1, 1);
  const Batch batch = DrawBatch(w, 0);
  StrategyContext ctx{m, c, w, batch, {}};
  const Plan plan =
      SingleUnitPlan(ctx, "megatron", 1, 1, 1, 1, 1, ScheduleKind::kOneFOneB, Recompute::kNone, Balance::kParams, 1);
  const PlanRun run = RunPlan(m, c, w, plan, batch);
  EXPECT_NEAR(run.metrics.mfu, run.costs.model_flops / (run.metrics.iteration_time_s * 66.9e12), 1e-12);
}

}  // namespace
}  // namespace loom
