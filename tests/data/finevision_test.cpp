// The FineVision-shaped subsets (data/finevision.h) against what the Entrain
// thesis says about them (seed 004 §4.7; notes §4.9): the macroscopic
// vision:LLM workload ratio under Loom's cost model on the thesis' A40s.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "loom/data/finevision.h"
#include "loom/data/sample_source.h"
#include "loom/spec/cluster.h"
#include "loom/spec/model.h"
#include "loom/spec/workload.h"
#include "loom/strategies/entrain/entrain.h"
#include "loom/strategies/entrain/profiling_batch.h"

namespace loom {
namespace {

double Ratio(const std::string& model, const std::string& dataset, int samples = 4096) {
  const Model m = LoadModel(model);
  const Cluster c = LoadCluster("entrain-testbed");
  const LayerCurves curves = FitModelCurves(m, c, std::vector<int>(m.modules.size(), 2));
  Workload w = LoadWorkload(dataset);
  const Batch b = MakeSampleSource(w.source)->Draw(samples, 7, 0);
  const auto p = MacroscopicProportions(m, curves, b.samples);
  return p[0] / p[1];
}

// The two ratios the thesis states: LLaVA-150k's dataset mean on
// Qwen2.5Vision + Llama3-1b is 2.43 (Fig. 4.5), SynthChartNet's on Llama3-3b
// 1.27 (Table 4.2, "the true dataset workload ratio"). 1.27 lies 1.2% below
// the ratio where TP-2 rounding of 16 GPUs flips 8:8 to 10:6 (9 / 7 = 1.286),
// too close for the most variable subset to be stable at 64 samples as Table
// 4.2 finds; Loom's SynthChartNet keeps Table 4.2's stability pattern
// (tests/strategies/entrain_schedule_test.cpp) at a mean 6% lower.
// Tables C.6-C.8 and 4.2 converge to 8:8 on a 16-GPU replica at TP 2 for
// ChartQA, CocoQA and SynthChartNet on 3b (Loom's rounding,
// strategies/entrain/profiling_batch.h).
TEST(FineVision, ReproducesTheThesisWorkloadRatios) {
  EXPECT_NEAR(Ratio("entrain-1b", "llava-150k"), 2.43, 0.03 * 2.43);
  EXPECT_NEAR(Ratio("entrain-3b", "synthchartnet"), 1.27, 0.07 * 1.27);
  EXPECT_LT(Ratio("entrain-3b", "synthchartnet"), 9.0 / 7.0);
  for (const char* d : {"synthchartnet", "chartqa", "cocoqa"}) {
    SCOPED_TRACE(d);
    EXPECT_EQ(ProportionalAllocation(16, {Ratio("entrain-3b", d), 1}, 2), (std::vector<int>{8, 8}));
  }
  // A larger LLM takes a larger share: every subset's ratio falls from 1b to 3b.
  for (const auto& s : FineVisionShapes()) EXPECT_GT(Ratio("entrain-1b", s.name), 1.5 * Ratio("entrain-3b", s.name));
}

// Fig. 4.3: vision and text tokens vary independently; SynthChartNet is the
// most variable subset (§4.7) in both.
TEST(FineVision, VisionAndTextVaryIndependentlySynthChartNetMost) {
  auto spread = [](const std::vector<double>& x) {
    double m = 0, v = 0;
    for (double a : x) m += a;
    m /= x.size();
    for (double a : x) v += (a - m) * (a - m);
    return std::sqrt(v / x.size()) / m;
  };
  std::map<std::string, std::pair<double, double>> cv;
  for (const auto& shape : FineVisionShapes()) {
    Rng rng(11);
    std::vector<double> px, text;
    for (int i = 0; i < 4000; ++i) {
      const Sample s = DrawFineVisionSample(shape, rng);
      ASSERT_EQ(s.images.size(), 1u);
      px.push_back(static_cast<double>(s.images[0].width_px * s.images[0].height_px));
      text.push_back(static_cast<double>(s.text_tokens));
      EXPECT_GE(px.back(), 4 * 28 * 28 * 0.9);
      EXPECT_LE(px.back(), 1280 * 28 * 28 * 1.01);
    }
    double mx = 0, my = 0, sxy = 0, sxx = 0, syy = 0;
    for (size_t i = 0; i < px.size(); ++i) mx += px[i] / px.size(), my += text[i] / px.size();
    for (size_t i = 0; i < px.size(); ++i) {
      sxy += (px[i] - mx) * (text[i] - my);
      sxx += (px[i] - mx) * (px[i] - mx);
      syy += (text[i] - my) * (text[i] - my);
    }
    EXPECT_LT(std::abs(sxy / std::sqrt(sxx * syy)), 0.05) << shape.name;
    cv[shape.name] = {spread(px), spread(text)};
  }
  for (const char* d : {"chartqa", "cocoqa", "llava-150k"}) {
    EXPECT_GT(cv["synthchartnet"].first, cv[d].first) << d;
    EXPECT_GT(cv["synthchartnet"].second, cv[d].second) << d;
  }
}

}  // namespace
}  // namespace loom
