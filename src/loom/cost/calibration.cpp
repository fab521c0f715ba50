#include "loom/cost/calibration.h"

#include <fmt/format.h>

#include <algorithm>

#include "loom/spec/yaml_reader.h"

namespace loom {

namespace {

bool ComputeBound(const CalibrationPoint& p, const GpuSpec& gpu, const Efficiency& e) {
  int c = static_cast<int>(p.op);
  return p.flops / (e.compute[c] * gpu.peak_flops) >= p.bytes / (e.memory[c] * gpu.hbm_bytes_per_s);
}

}  // namespace

Efficiency FitEfficiency(const std::vector<CalibrationPoint>& points, const GpuSpec& gpu, const Efficiency& start) {
  Efficiency e = start;
  std::vector<bool> bound(points.size());
  for (int iter = 0; iter < 50; ++iter) {
    for (size_t i = 0; i < points.size(); ++i) {
      bound[i] = ComputeBound(points[i], gpu, e);
    }
    Efficiency next = e;
    for (int c = 0; c < kNumOpClasses; ++c) {
      double cxx = 0, cxt = 0, mxx = 0, mxt = 0;
      for (size_t i = 0; i < points.size(); ++i) {
        const auto& p = points[i];
        if (static_cast<int>(p.op) != c) {
          continue;
        }
        if (bound[i]) {
          double x = p.flops / gpu.peak_flops;
          cxx += x * x;
          cxt += x * p.time_s;
        } else {
          double x = p.bytes / gpu.hbm_bytes_per_s;
          mxx += x * x;
          mxt += x * p.time_s;
        }
      }
      if (cxt > 0) {
        next.compute[c] = std::min(1.0, cxx / cxt);
      }
      if (mxt > 0) {
        next.memory[c] = std::min(1.0, mxx / mxt);
      }
    }
    bool same = true;
    for (size_t i = 0; i < points.size(); ++i) {
      same = same && ComputeBound(points[i], gpu, next) == bound[i];
    }
    e = next;
    if (same) {
      break;
    }
  }
  return e;
}

Calibration ParseCalibration(const std::string& yaml_text, const std::string& file) {
  YamlMap doc(ParseYaml(yaml_text, file), file, "");
  Calibration cal;
  cal.gpu = doc.String("gpu");
  GpuSpec gpu;
  try {
    gpu = FindGpu(cal.gpu);
  } catch (const Error& e) {
    throw doc.ErrorAt("gpu", e.what());
  }
  cal.measured_with = doc.String("measured_with", "");
  doc.String("measured_on", "");
  YAML::Node points = doc.Child("points");
  if (!points.IsSequence() || points.size() == 0) {
    throw doc.ErrorAt("points", "expected a non-empty list of {op, flops, bytes, time_s}");
  }
  doc.RejectUnknownKeys();
  cal.points = ParseCalibrationPoints(points, file, "points", gpu);
  cal.efficiency = FitEfficiency(cal.points, gpu);
  return cal;
}

std::vector<CalibrationPoint> ParseCalibrationPoints(const YAML::Node& points, const std::string& file,
                                                     const std::string& field, const GpuSpec& gpu) {
  if (!points.IsSequence() || points.size() == 0) {
    throw Error(
        fmt::format("{}: {}: expected a non-empty list of {{op, flops, bytes, time_s}}", Where(points, file), field));
  }
  std::vector<CalibrationPoint> out;
  for (size_t i = 0; i < points.size(); ++i) {
    YamlMap p(points[i], file, fmt::format("{}[{}]", field, i));
    CalibrationPoint cp;
    std::string op = p.Enum("op", {"gemm", "attention", "elementwise", "conv"});
    cp.op = op == "gemm"          ? OpClass::kGemm
            : op == "attention"   ? OpClass::kAttention
            : op == "elementwise" ? OpClass::kElementwise
                                  : OpClass::kConv;
    cp.flops = p.NonNegativeReal("flops", 0);
    cp.bytes = p.NonNegativeReal("bytes", 0);
    cp.time_s = p.PositiveReal("time_s");
    p.String("label", "");
    if (cp.flops == 0 && cp.bytes == 0) {
      throw p.ErrorAt("flops", "a point needs flops > 0 or bytes > 0");
    }
    // 2% above the datasheet's peak is timer noise; more is a wrong time,
    // FLOP count, GPU or precision, which the fit would silently cap.
    const double rate = cp.flops / cp.time_s;
    if (rate > 1.02 * gpu.peak_flops) {
      throw p.ErrorAt("time_s", fmt::format("{:.4g} FLOP in {:.4g} s is {:.1f} TFLOP/s, above the {}'s peak of {:.1f} "
                                            "TFLOP/s at this precision: check time_s, flops and the precision",
                                            cp.flops, cp.time_s, rate / 1e12, gpu.name, gpu.peak_flops / 1e12));
    }
    p.RejectUnknownKeys();
    out.push_back(cp);
  }
  return out;
}

Calibration LoadCalibration(const std::string& path) { return ParseCalibration(ReadTextFile(path, "calibration YAML"), path); }

}  // namespace loom
