// The measured-profile cost model against measured hardware (issue 13): the
// shipped H100 profile predicts every whole layer of layers.json within 5%
// (forward and forward + backward), generalizes to held-out points
// (leave-one-out), and the llama3-1b training step of steps.json within 15%;
// the timm ViT-H steps are reported with what explains their error. The
// measurements are copies of ../shared/measurements/h100 in tests/data/h100.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include <fmt/format.h>
#include "loom/cost/collectives.h"
#include "loom/cost/layer_work.h"
#include "loom/cost/profile.h"
#include "loom/cost/profile_data.h"
#include "loom/data/sample_source.h"
#include "loom/sim/plan_run.h"
#include "loom/spec/cluster.h"
#include "loom/spec/model.h"
#include "loom/strategies/plan_builders.h"

#include "test_util.h"

namespace loom {
namespace {

nlohmann::json ReadJson(const std::string& name) {
  std::ifstream in(std::string(LOOM_TEST_DATA) + "/h100/" + name);
  return nlohmann::json::parse(in);
}

Profile ShippedH100() {
  for (const auto& f : profile_data::Files()) {
    if (std::string(f.name) == "h100.yaml") return ParseProfile(f.text, "h100.yaml");
  }
  ADD_FAILURE() << "no shipped h100 profile";
  return {};
}

struct Measured {
  Layer layer;
  TokenStats tokens;
  int tp = 1;
  double forward_s = 0, forward_backward_s = 0;
  std::string name;
};

std::vector<Measured> LayersJson() {
  std::vector<Measured> out;
  for (const auto& r : ReadJson("layers.json")) {
    Measured m;
    m.layer.kind = LayerKind::kTransformer;
    m.layer.hidden = r["hidden"];
    m.layer.ffn_hidden = r["ffn_hidden"];
    m.layer.heads = r["heads"];
    m.layer.kv_heads = r["kv_heads"];
    m.layer.gated_mlp = r["gated"];
    m.layer.causal = r["causal"];
    const double b = r["batch"], s = r["seq"];
    m.tokens.tokens = b * s;
    m.tokens.sum_sq = b * s * s;
    m.tokens.sequences = b;
    m.tp = r["tp_shard"];
    m.forward_s = r["fwd_s"];
    m.forward_backward_s = r["fwd_bwd_s"];
    m.name = fmt::format("{} b{} s{} tp{}", r["layer"].get<std::string>(), b, s, m.tp);
    out.push_back(std::move(m));
  }
  return out;
}

ComputeTimes Predict(const CostModel& model, const Measured& m) {
  const GpuSpec& gpu = FindGpu("h100");
  return model.LayerCompute(m.layer, m.tokens, m.tp, EstimateLayerWork(m.layer, m.tokens, m.tp), gpu, Precision::kBf16);
}

TEST(H100Profile, PredictsEveryMeasuredLayerWithinFivePercent) {
  const ProfiledCostModel model(ShippedH100());
  const RooflineCostModel roofline;
  const RooflineCostModel fitted(model.fitted_efficiency());
  std::printf("%-26s %9s %9s %9s %9s | %9s %9s %9s %9s\n", "layer (kernels of one GPU)", "fwd ms", "profile", "fitted",
              "roofline", "f+b ms", "profile", "fitted", "roofline");
  for (const Measured& m : LayersJson()) {
    SCOPED_TRACE(m.name);
    const ComputeTimes p = Predict(model, m), f = Predict(fitted, m), r = Predict(roofline, m);
    auto fb = [](const ComputeTimes& t) { return t.forward_s + t.backward_data_s + t.backward_weight_s; };
    auto pct = [](double x, double y) { return 100.0 * (x / y - 1.0); };
    std::printf("%-26s %9.3f %+8.1f%% %+8.1f%% %+8.1f%% | %9.3f %+8.1f%% %+8.1f%% %+8.1f%%\n", m.name.c_str(),
                m.forward_s * 1e3, pct(p.forward_s, m.forward_s), pct(f.forward_s, m.forward_s),
                pct(r.forward_s, m.forward_s), m.forward_backward_s * 1e3, pct(fb(p), m.forward_backward_s),
                pct(fb(f), m.forward_backward_s), pct(fb(r), m.forward_backward_s));
    EXPECT_NEAR(p.forward_s / m.forward_s, 1.0, 0.05);
    EXPECT_NEAR(fb(p) / m.forward_backward_s, 1.0, 0.05);
  }
}

// Generalization: each layers.json point predicted by a profile that never saw
// it (the other points of its shape, the sweeps and the ops remain).
TEST(H100Profile, HeldOutLayersStayClose) {
  const Profile full = ShippedH100();
  const std::vector<Measured> measured = LayersJson();
  double worst = 0;
  for (const Measured& m : measured) {
    Profile p = full;
    std::erase_if(p.layers, [&](const ProfileLayerPoint& pt) {
      return pt.shape.hidden == m.layer.hidden && pt.shape.ffn_hidden == m.layer.ffn_hidden && pt.tp == m.tp &&
             !pt.frozen && static_cast<double>(pt.batch * pt.seq) == m.tokens.tokens &&
             static_cast<double>(pt.batch) == m.tokens.sequences;
    });
    ASSERT_EQ(p.layers.size() + 1, full.layers.size()) << m.name;
    const ProfiledCostModel model(std::move(p));
    const ComputeTimes t = Predict(model, m);
    const double fb = t.forward_s + t.backward_data_s + t.backward_weight_s;
    const double err_f = t.forward_s / m.forward_s - 1, err_fb = fb / m.forward_backward_s - 1;
    std::printf("held out %-26s fwd %+6.1f%%  fwd+bwd %+6.1f%%\n", m.name.c_str(), 100 * err_f, 100 * err_fb);
    worst = std::max({worst, std::abs(err_f), std::abs(err_fb)});
  }
  std::printf("worst held-out error %.1f%%\n", 100 * worst);
  // The worst is vit-huge at batch 32, which layers.json and token_sweeps.json
  // measured 20% apart (fwd+bwd 2.33 vs 2.80 ms): the bound is the files' own spread.
  EXPECT_LT(worst, 0.35);
}

// steps.json: whole iterations on one GPU, simulated from the model zoo.
struct Step {
  double measured_s = 0, predicted_s = 0, predicted_peak_bytes = 0, measured_peak_bytes = 0;
};

Step SimulateStep(const std::string& model_name, const nlohmann::json& row, Recompute recompute) {
  const Model model = LoadModel(model_name);
  Cluster cluster = MakeCluster("h100", 1, 1);
  Workload w = DefaultWorkload(model);
  if (w.source.kind != "text") {
    // timm's ViT step: one 224 px image per sample (LAION pairs packed one per sample).
    w = LoadWorkload("laion");
    w.source.pack_tokens = w.source.image_tokens + 77;
  }
  const int micro_batch = row["micro_batch"], microbatches = row["microbatches"];
  w.global_batch = micro_batch * microbatches;
  w.microbatch_size = micro_batch;
  if (w.source.kind == "text") w.source.seq_len = row["seq"];
  const Batch batch = DrawBatch(w, 0);
  StrategyContext ctx{model, cluster, w, batch, {}};
  const Plan plan = SingleUnitPlan(ctx, "megatron", 1, 1, 1, 1, microbatches, ScheduleKind::kOneFOneB, recompute,
                                   Balance::kParams, 1);
  const PlanRun run = RunPlan(model, cluster, w, plan, batch);
  return {row["iteration_s"], run.metrics.iteration_time_s, run.metrics.peak_mem_bytes, row["peak_allocated_bytes"]};
}

TEST(H100Profile, PredictsTheLlama1bTrainingStepWithinFifteenPercent) {
  for (const auto& row : ReadJson("steps.json")) {
    if (row["model"] != "llama3-1b") continue;
    const Step s = SimulateStep("llama3-1b", row, Recompute::kNone);
    std::printf(
        "llama3-1b step: measured %.1f ms, predicted %.1f ms (%+.1f%%); peak memory measured %.1f GiB, "
        "predicted %.1f GiB\n",
        s.measured_s * 1e3, s.predicted_s * 1e3, 100 * (s.predicted_s / s.measured_s - 1),
        s.measured_peak_bytes / (1 << 30), s.predicted_peak_bytes / (1 << 30));
    EXPECT_NEAR(s.predicted_s / s.measured_s, 1.0, 0.15);
  }
}

TEST(H100Profile, ReportsTheTimmVitHugeSteps) {
  for (const auto& row : ReadJson("steps.json")) {
    if (row["model"] != "vit-huge") continue;
    const bool ckpt = row["checkpointing"];
    const Step s = SimulateStep("vit-huge", row, ckpt ? Recompute::kFull : Recompute::kNone);
    std::printf("vit-huge (timm, fp32 master + bf16 autocast) step%s: measured %.1f ms, predicted %.1f ms (%+.1f%%)\n",
                ckpt ? " with checkpointing" : "", s.measured_s * 1e3, s.predicted_s * 1e3,
                100 * (s.predicted_s / s.measured_s - 1));
    // Reported, not asserted tightly: see docs/cost-model.md for what explains the gap.
    EXPECT_GT(s.predicted_s, 0.5 * s.measured_s);
    EXPECT_LT(s.predicted_s, 1.5 * s.measured_s);
  }
}

// Full recomputation (issue 44: "priced at about +30% of a step; measured
// steps show more"): the one measured pair, timm's ViT-Huge with and without
// checkpointing (steps.json), adds 41.1 ms to a 189.7 ms step (+21.6%); Loom
// adds 44.5 ms to 158.9 ms (+28.0%). The added time, the recomputed forward,
// agrees within 8%; the ratio differs because the step without it is priced
// 16% short (docs/cost-model.md, "Measured steps").
TEST(H100Profile, FullRecomputationAddsWhatTheMeasuredVitStepAdds) {
  double measured[2] = {0, 0}, predicted[2] = {0, 0};
  for (const auto& row : ReadJson("steps.json")) {
    if (row["model"] != "vit-huge") continue;
    const bool ckpt = row["checkpointing"];
    const Step s = SimulateStep("vit-huge", row, ckpt ? Recompute::kFull : Recompute::kNone);
    measured[ckpt] = s.measured_s;
    predicted[ckpt] = s.predicted_s;
  }
  ASSERT_GT(measured[0], 0);
  ASSERT_GT(measured[1], measured[0]);
  const double measured_added = measured[1] - measured[0], predicted_added = predicted[1] - predicted[0];
  std::printf("full recomputation adds %.1f ms measured (%+.1f%%), %.1f ms predicted (%+.1f%%)\n",
              measured_added * 1e3, 100 * measured_added / measured[0], predicted_added * 1e3,
              100 * predicted_added / predicted[0]);
  EXPECT_NEAR(predicted_added / measured_added, 1.0, 0.15);
  // Neither more than the measured share by a third, nor less than it.
  EXPECT_GT(predicted_added / predicted[0], measured_added / measured[0]);
  EXPECT_LT(predicted_added / predicted[0], 1.34 * measured_added / measured[0]);
}

TEST(Profile, BadFilesNameTheFileLineAndField) {
  const std::string ops = "ops:\n  - {op: gemm, flops: 1e9, bytes: 1e6, time_s: 1e-5}\n";
  const std::string layer =
      "  - {hidden: 64, ffn_hidden: 256, heads: 4, kv_heads: 4, batch: 1, seq: 128, fwd_s: 1e-4, "
      "bwd_s: 2e-4";
  test::ExpectError([&] { ParseProfile("gpu: tpu9\n" + ops + "layers: []\n", "p.yaml"); }, {"p.yaml:1", "gpu", "h100"});
  test::ExpectError([&] { ParseProfile("gpu: h100\n" + ops + "layers:\n" + layer + ", tp: 3}\n", "p.yaml"); },
                    {"p.yaml:5", "layers[0].tp", "does not split 4 heads"});
  test::ExpectError([&] { ParseProfile("gpu: h100\n" + ops + "layers:\n" + layer + ", speed: 2}\n", "p.yaml"); },
                    {"p.yaml:5", "speed"});
  test::ExpectError(
      [&] {
        ParseProfile("gpu: h100\n" + ops +
                         "layers:\n  - {hidden: 64, ffn_hidden: 256, heads: 4, kv_heads: 4, "
                         "batch: 1, seq: 128, fwd_s: -1, bwd_s: 2e-4}\n",
                     "p.yaml");
      },
      {"p.yaml:5", "layers[0].fwd_s"});
  test::ExpectError([&] { ParseProfile("gpu: h100\nops: []\nlayers: []\n", "p.yaml"); }, {"p.yaml", "ops"});
  test::ExpectError([&] { ParseProfile("gpu: h100\napplies_to: [h100, h999]\n" + ops + "layers: []\n", "p.yaml"); },
                    {"applies_to[1]", "h999"});
  // Key-value heads that do not group the query heads (no GQA layer has them).
  test::ExpectError(
      [&] {
        ParseProfile("gpu: h100\n" + ops +
                         "layers:\n  - {hidden: 64, ffn_hidden: 256, heads: 4, kv_heads: 3, "
                         "batch: 1, seq: 128, fwd_s: 1e-4, bwd_s: 2e-4}\n",
                     "p.yaml");
      },
      {"p.yaml:5", "layers[0].kv_heads", "3 key-value heads do not group 4", "a divisor of 4"});
  // The same point twice: the correction would keep one and drop the other.
  test::ExpectError([&] { ParseProfile("gpu: h100\n" + ops + "layers:\n" + layer + "}\n" + layer + "}\n", "p.yaml"); },
                    {"p.yaml:6", "layers[1].seq", "as layers[0]"});
  // Half the time at peak (989 TFLOP/s bf16 dense on an H100): no GPU runs
  // faster than its peak, and the fit would cap it without a word.
  test::ExpectError(
      [&] { ParseProfile("gpu: h100\nops:\n  - {op: gemm, flops: 1e12, bytes: 1e6, time_s: 5e-4}\n", "p.yaml"); },
      {"p.yaml:3", "ops[0].time_s", "2000.0 TFLOP/s", "above the", "peak"});
  // An L2-resident elementwise op faster than HBM is accepted.
  EXPECT_NO_THROW(ParseProfile(
      "gpu: h100\nops:\n  - {op: elementwise, flops: 1e3, bytes: 1e6, time_s: 1e-7}\nlayers: []\n", "p.yaml"));
}

// Between two measured token counts the correction is linear in log(tokens),
// and beyond them it is held: checked against the two anchors by hand.
TEST(Profile, CorrectionInterpolatesInLogTokens) {
  Profile p = ShippedH100();
  p.layers.clear();
  ProfileLayerPoint a;
  a.shape = {2048, 8192, 32, 8, true, true};
  a.batch = 1;
  a.seq = 1024;
  a.forward_s = 1e-3;
  a.backward_s = 2e-3;
  ProfileLayerPoint b = a;
  b.seq = 4096;
  b.forward_s = 3e-3;
  b.backward_s = 5e-3;
  p.layers = {a, b};
  const ProfiledCostModel model(p);
  auto tokens = [](double seq) {
    TokenStats t;
    t.tokens = seq;
    t.sum_sq = seq * seq;
    t.sequences = 1;
    return t;
  };
  const auto ca = model.Correction(a.shape, 1, false, tokens(1024));
  const auto cb = model.Correction(a.shape, 1, false, tokens(4096));
  const auto mid = model.Correction(a.shape, 1, false, tokens(2048));  // halfway in log tokens
  EXPECT_NEAR(mid.first, 0.5 * (ca.first + cb.first), 1e-12);
  EXPECT_NEAR(mid.second, 0.5 * (ca.second + cb.second), 1e-12);
  EXPECT_EQ(model.Correction(a.shape, 1, false, tokens(100)), ca);    // held below
  EXPECT_EQ(model.Correction(a.shape, 1, false, tokens(65536)), cb);  // held above
  // At an anchor the prediction is the measurement.
  Layer l;
  l.hidden = 2048;
  l.ffn_hidden = 8192;
  l.heads = 32;
  l.kv_heads = 8;
  l.gated_mlp = true;
  l.causal = true;
  const ComputeTimes t =
      model.LayerCompute(l, tokens(4096), 1, EstimateLayerWork(l, tokens(4096), 1), FindGpu("h100"), Precision::kBf16);
  EXPECT_NEAR(t.forward_s, 3e-3, 1e-12);
  EXPECT_NEAR(t.backward_data_s + t.backward_weight_s, 5e-3, 1e-12);
}

// What `loom profile` writes reads back as the same profile; a profile
// measured in fp32 (the CPU runtime) corrects fp32 layers to its measurements
// and leaves 16-bit ones to the fitted roofline (and the reverse for bf16).
TEST(Profile, WrittenProfilesReadBackAndCorrectTheirOwnPrecision) {
  Profile p = ShippedH100();
  p.layers.resize(2);
  p.applies_to.clear();
  p.precision = Precision::kFp32;
  p.source = "test";
  // Relabelled fp32, the bf16 ops would run faster than the fp32 peak (the
  // reader refuses that): slow them by the peaks' ratio.
  const double ratio = FindGpu("h100").peak_flops / AtPrecision(FindGpu("h100"), Precision::kFp32).peak_flops;
  for (auto& op : p.ops) op.time_s *= ratio;
  const Profile back = ParseProfile(ProfileToYaml(p), "written.yaml");
  EXPECT_EQ(back.gpu, p.gpu);
  EXPECT_TRUE(back.applies_to.empty());
  EXPECT_EQ(back.precision, Precision::kFp32);
  ASSERT_EQ(back.ops.size(), p.ops.size());
  for (size_t i = 0; i < p.ops.size(); ++i) {
    EXPECT_EQ(back.ops[i].op, p.ops[i].op);
    EXPECT_DOUBLE_EQ(back.ops[i].flops, p.ops[i].flops);
    EXPECT_NEAR(back.ops[i].time_s, p.ops[i].time_s, 1e-8 * p.ops[i].time_s);
  }
  ASSERT_EQ(back.layers.size(), 2u);
  EXPECT_EQ(back.layers[1].shape, p.layers[1].shape);
  EXPECT_EQ(back.layers[1].seq, p.layers[1].seq);
  const ProfiledCostModel model(back);
  const ProfileLayerPoint& pt = back.layers[0];
  const Layer l = LayerOf(pt.shape);
  const TokenStats t = TokensOf(pt.batch, pt.seq);
  // Each layer's work at its precision's element bytes, as the simulator
  // prices it (cost/layer_pricing.cpp); the anchors are priced so too.
  const ComputeTimes fp32 =
      model.LayerCompute(l, t, pt.tp, EstimateLayerWork(l, t, pt.tp, 4), FindGpu("h100"), Precision::kFp32);
  EXPECT_NEAR(fp32.forward_s, pt.forward_s, 1e-9 * pt.forward_s);  // at its anchor: the measurement
  const ComputeTimes bf16 =
      model.LayerCompute(l, t, pt.tp, EstimateLayerWork(l, t, pt.tp), FindGpu("h100"), Precision::kBf16);
  EXPECT_GT(std::abs(bf16.forward_s - pt.forward_s), 1e-3 * pt.forward_s);  // not corrected: another precision
}

// A profile priced against a run of another precision says so where its name
// is printed (`run --compare`, `plan --run`): a CPU profile (fp32) pricing the
// default bf16 run came out 12x off without a word (doc audit D3-03).
TEST(Profile, ItsNameSaysWhenItsMeasurementsDoNotApply) {
  const ProfiledCostModel bf16(ShippedH100());
  EXPECT_EQ(CostModelNameFor(bf16, Precision::kBf16), bf16.name());
  EXPECT_EQ(CostModelNameFor(bf16, Precision::kFp16), bf16.name());  // 16-bit stands for 16-bit
  const std::string fp32 = CostModelNameFor(bf16, Precision::kFp32);
  EXPECT_EQ(fp32.rfind(bf16.name(), 0), 0u);
  EXPECT_NE(fp32.find("measured in bf16, so this fp32 work is priced by its fitted roofline"), std::string::npos)
      << fp32;
  EXPECT_NE(fp32.find("--precision bf16"), std::string::npos);
  const RooflineCostModel roofline(Efficiency(), "roofline");
  EXPECT_EQ(CostModelNameFor(roofline, Precision::kFp32), "roofline");
}

// The documented calibration file is what `--profile FILE` takes too (doc
// audit D3-07: no command read it): its points fit the roofline as a
// profile's ops do, and no layer corrects it.
TEST(Profile, ACalibrationFileIsAProfileOfKernels) {
  const std::string path = test::WriteTemp("cal.yaml",
                                           "gpu: h100\nmeasured_with: test\npoints:\n"
                                           "  - {op: gemm, flops: 1.1e12, bytes: 1.0e8, time_s: 1.6e-3}\n"
                                           "  - {op: elementwise, bytes: 4.0e9, time_s: 1.5e-3}\n");
  const Profile p = LoadProfile(path);
  EXPECT_EQ(p.gpu, "h100");
  EXPECT_EQ(p.precision, Precision::kBf16);
  EXPECT_TRUE(p.layers.empty());
  ASSERT_EQ(p.ops.size(), 2u);
  const ProfiledCostModel model(p);
  const Efficiency want = LoadCalibration(path).efficiency;
  // 1.1e12 / 989.4e12 s at peak over 1.6 ms: 69.5% of the GEMM peak.
  EXPECT_NEAR(model.fitted_efficiency().compute[0], 1.1e12 / FindGpu("h100").peak_flops / 1.6e-3, 1e-12);
  for (int c = 0; c < kNumOpClasses; ++c) {
    EXPECT_DOUBLE_EQ(model.fitted_efficiency().compute[c], want.compute[c]);
    EXPECT_DOUBLE_EQ(model.fitted_efficiency().memory[c], want.memory[c]);
  }
  EXPECT_NO_THROW(SelectCostModel(path, FindGpu("h100")));
}

// A profile's measured link (`loom profile`: two processes of one machine)
// becomes every link of a cluster priced by it; a bad link is an error naming it.
TEST(Profile, AMeasuredLinkPricesEveryMessage) {
  Profile p = ShippedH100();
  p.applies_to.clear();
  p.link = {2e9, 5e-5};
  const std::string path = test::WriteTemp("linked-profile.yaml", ProfileToYaml(p));
  Cluster c = MakeCluster("h100", 2, 8);
  ApplyCostModel(c, path);
  for (const Link* l : {&c.nvlink, &c.pcie, &c.network}) {
    EXPECT_DOUBLE_EQ(l->bytes_per_s, 2e9);
    EXPECT_DOUBLE_EQ(l->latency_s, 5e-5);
  }
  EXPECT_DOUBLE_EQ(P2PTime_s(1e6, c.nvlink), 5e-5 + 1e6 / 2e9);
  Cluster untouched = MakeCluster("h100", 2, 8);
  const double nvlink = untouched.nvlink.bytes_per_s;
  ApplyCostModel(untouched, "default");
  EXPECT_EQ(untouched.nvlink.bytes_per_s, nvlink);
  const std::string ops = "ops:\n  - {op: gemm, flops: 1e9, bytes: 1e6, time_s: 1e-5}\n";
  test::ExpectError(
      [&] { ParseProfile("gpu: h100\n" + ops + "link: {bytes_per_s: 0, latency_s: 1e-5}\nlayers: []\n", "p.yaml"); },
      {"p.yaml", "link.bytes_per_s"});
}

}  // namespace
}  // namespace loom
