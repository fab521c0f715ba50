// The FineVision-shaped subsets (data/finevision.h): the derived ones against
// the FineVision subset table they are taken from; the -fitted ones against what
// the Entrain thesis says about them (seed 004 §4.7; notes §4.9), the
// macroscopic vision:LLM workload ratio under Loom's cost model on the thesis' A40s.
#include <gtest/gtest.h>

#include <algorithm>
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
// Only the -fitted subsets reproduce them: they were tuned to.
TEST(FineVision, FittedSubsetsReproduceTheThesisWorkloadRatios) {
  EXPECT_NEAR(Ratio("entrain-1b", "llava-150k-fitted"), 2.43, 0.03 * 2.43);
  EXPECT_NEAR(Ratio("entrain-3b", "synthchartnet-fitted"), 1.27, 0.07 * 1.27);
  EXPECT_LT(Ratio("entrain-3b", "synthchartnet-fitted"), 9.0 / 7.0);
  for (const char* d : {"synthchartnet-fitted", "chartqa-fitted", "cocoqa-fitted"}) {
    SCOPED_TRACE(d);
    EXPECT_EQ(ProportionalAllocation(16, {Ratio("entrain-3b", d), 1}, 2), (std::vector<int>{8, 8}));
  }
  // A larger LLM takes a larger share: every subset's ratio falls from 1b to 3b.
  for (const auto& s : FineVisionShapes()) EXPECT_GT(Ratio("entrain-1b", s.name), 1.5 * Ratio("entrain-3b", s.name));
}

// Fig. 4.3: vision and text tokens vary independently (every subset);
// SynthChartNet is the most variable subset (§4.7) in both (the -fitted ones:
// no source publishes the derived subsets' spreads, see finevision.cpp).
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
  for (const char* d : {"chartqa-fitted", "cocoqa-fitted", "llava-150k-fitted"}) {
    EXPECT_GT(cv["synthchartnet-fitted"].first, cv[d].first) << d;
    EXPECT_GT(cv["synthchartnet-fitted"].second, cv[d].second) << d;
  }
}

// The derived subsets' means are the FineVision subset table's (Wiedmann et al.,
// 2025): one image a sample, (question + answer tokens) / samples; image areas
// as finevision.cpp derives them (clamping to Qwen2.5-VL's range trims the
// charts' log-normal tail by about 2%). Each has a -fitted twin, labelled.
TEST(FineVision, DerivedSubsetsFollowTheFineVisionTable) {
  struct Row {
    const char* name;
    double images, samples, question_tokens, answer_tokens, mpx;
  };
  for (const Row& r : {Row{"synthchartnet", 500000, 500000, 2169240, 67392223, 768.0 * 576 / 1e6},
                       Row{"chartqa", 18265, 18265, 625569, 134793, 800.0 * 557 / 1e6},
                       Row{"cocoqa", 46287, 46287, 1136238, 212480, 0.2506},
                       Row{"llava-150k", 157710, 157710, 4412600, 28719278, 0.2506}}) {
    SCOPED_TRACE(r.name);
    const FineVisionShape* shape = FindFineVisionShape(r.name);
    ASSERT_NE(shape, nullptr);
    EXPECT_FALSE(shape->fitted);
    const FineVisionShape* fitted = FindFineVisionShape(std::string(r.name) + "-fitted");
    ASSERT_NE(fitted, nullptr);
    EXPECT_TRUE(fitted->fitted);
    Rng rng(5);
    double px = 0, text = 0;
    const int n = 20000;
    for (int i = 0; i < n; ++i) {
      const Sample s = DrawFineVisionSample(*shape, rng);
      ASSERT_DOUBLE_EQ(static_cast<double>(s.images.size()), r.images / r.samples);
      px += static_cast<double>(s.images[0].width_px * s.images[0].height_px) / n;
      text += static_cast<double>(s.text_tokens) / n;
    }
    const double table_text = (r.question_tokens + r.answer_tokens) / r.samples;
    EXPECT_NEAR(text, table_text, 0.03 * table_text);
    EXPECT_NEAR(px / 1e6, r.mpx, 0.05 * r.mpx);
  }
}

// spec/ lists the subsets' names itself (it comes before data/ in the flow):
// every shape is a named workload with Entrain's batch, and every FineVision
// workload name has a shape.
TEST(FineVision, EverySubsetIsANamedWorkload) {
  const std::vector<std::string> names = WorkloadNames();
  std::vector<std::string> shapes;
  for (const auto& s : FineVisionShapes()) {
    shapes.push_back(s.name);
    EXPECT_NE(std::find(names.begin(), names.end(), s.name), names.end()) << s.name;
    EXPECT_EQ(LoadWorkload(s.name).global_batch, 512) << s.name;
  }
  for (const auto& n : names) {
    const bool finevision = n.find("chart") != std::string::npos || n.find("coco") != std::string::npos ||
                            n.find("llava") != std::string::npos;
    if (finevision) EXPECT_NE(FindFineVisionShape(n), nullptr) << n;
  }
  EXPECT_EQ(shapes.size(), 8u);
}

}  // namespace
}  // namespace loom
