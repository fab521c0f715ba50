// Fitting recovers efficiency factors and Entrain's quadratic exactly from
// noiseless points, and gives the least-squares answer on noisy ones.
#include <gtest/gtest.h>

#include "loom/cost/calibration.h"
#include "loom/cost/quadratic_fit.h"
#include "test_util.h"

namespace loom {
namespace {

TEST(Calibration, RecoversKnownFactorsFromSyntheticMeasurements) {
  GpuSpec g = FindGpu("h100");
  Efficiency truth;
  truth.compute = {0.62, 0.38, 1.0, 0.41};
  truth.memory = {0.9, 0.7, 0.73, 0.8};
  std::vector<CalibrationPoint> points;
  for (double scale : {1e9, 1e10, 1e11, 1e12}) {
    for (OpClass c : {OpClass::kGemm, OpClass::kAttention, OpClass::kConv}) {
      points.push_back({c, scale, scale / 500, OpTime_s({scale, scale / 500}, c, g, truth)});
    }
    points.push_back({OpClass::kGemm, scale / 1000, scale, OpTime_s({scale / 1000, scale}, OpClass::kGemm, g, truth)});
    points.push_back({OpClass::kElementwise, 0, scale, OpTime_s({0, scale}, OpClass::kElementwise, g, truth)});
  }
  Efficiency fit = FitEfficiency(points, g);
  for (int c : {0, 1, 3}) {
    EXPECT_NEAR(fit.compute[c], truth.compute[c], 1e-12) << c;
  }
  EXPECT_NEAR(fit.memory[0], truth.memory[0], 1e-12);
  EXPECT_NEAR(fit.memory[2], truth.memory[2], 1e-12);
  EXPECT_DOUBLE_EQ(fit.memory[1], Efficiency().memory[1]);  // no memory-bound attention points
}

TEST(Calibration, NoisyPointsGiveTheLeastSquaresFactor) {
  GpuSpec g = FindGpu("a800");
  // Ideal times x = 1, 2, 3 ms; measured 1.5, 3.3, 4.2 ms. argmin sum (k x - t)^2: k = sum x t / sum x^2.
  std::vector<CalibrationPoint> p;
  double xs[] = {1e-3, 2e-3, 3e-3}, ts[] = {1.5e-3, 3.3e-3, 4.2e-3};
  for (int i = 0; i < 3; ++i) {
    p.push_back({OpClass::kGemm, xs[i] * g.peak_flops, 1, ts[i]});
  }
  double k = (1 * 1.5 + 2 * 3.3 + 3 * 4.2) / (1 + 4 + 9.0);
  EXPECT_NEAR(FitEfficiency(p, g).compute[0], 1 / k, 1e-12);
}

TEST(Calibration, FileFormatAndErrors) {
  std::string path = test::WriteTemp("cal.yaml", R"(gpu: h100
measured_with: "bench/gpu/matmul --sizes 4096"
points:
  - {op: gemm, flops: 1.0e12, bytes: 1.0e8, time_s: 2.0e-3}
)");
  Calibration cal = LoadCalibration(path);
  EXPECT_NEAR(cal.efficiency.compute[0], 1e12 / FindGpu("h100").peak_flops / 2e-3, 1e-12);
  std::string bad = test::WriteTemp("cal_bad.yaml", "gpu: h100\npoints:\n  - {op: matmul, flops: 1, time_s: 1}\n");
  test::ExpectError([&] { LoadCalibration(bad); }, {"cal_bad.yaml:3:", "points[0].op", "gemm, attention"});
  std::string neg = test::WriteTemp("cal_neg.yaml", "gpu: h100\npoints:\n  - {op: gemm, flops: 1, time_s: -1}\n");
  test::ExpectError([&] { LoadCalibration(neg); }, {"cal_neg.yaml:3:", "time_s", "must be > 0"});
}

TEST(QuadraticFit, RecoversEntrainsCurveExactly) {
  QuadraticCost truth{3e-9, 2e-6, 4e-4};
  std::vector<double> x = {64, 256, 1024, 4096, 16384}, y;
  for (double v : x) y.push_back(truth(v));
  QuadraticCost fit = FitQuadratic(x, y);
  EXPECT_NEAR(fit.a / truth.a, 1, 1e-9);
  EXPECT_NEAR(fit.b / truth.b, 1, 1e-9);
  EXPECT_NEAR(fit.c / truth.c, 1, 1e-9);
}

TEST(QuadraticFit, ResidualIsOrthogonalToTheBasis) {
  std::vector<double> x = {1, 2, 3, 4, 5}, y = {2.1, 3.9, 9.2, 15.8, 26.3};
  QuadraticCost q = FitQuadratic(x, y);
  double r0 = 0, r1 = 0, r2 = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    double r = y[i] - q(x[i]);
    r0 += r;
    r1 += r * x[i];
    r2 += r * x[i] * x[i];
  }
  EXPECT_NEAR(r0, 0, 1e-9);
  EXPECT_NEAR(r1, 0, 1e-9);
  EXPECT_NEAR(r2, 0, 1e-8);
  test::ExpectError([] { FitQuadratic({1, 1, 2}, {1, 2, 3}); }, {"3 or more distinct"});
}

}  // namespace
}  // namespace loom
