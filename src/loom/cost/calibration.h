// Calibration: measured (op class, FLOPs, bytes, time) points for one GPU and
// the efficiency factors fitted to them (docs/cost-model.md#calibration).
// Fitting: each point is compute- or memory-bound under the current factors;
// for each op class and bound, the factor minimizing the squared time error
// sum (x/e - t)^2 is e = sum x^2 / sum x t, x being the ideal time at peak.
// Points are reclassified with the new factors until nothing changes.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

#include "loom/cost/device_time.h"

namespace loom {

struct CalibrationPoint {
  OpClass op = OpClass::kGemm;
  double flops = 0;
  double bytes = 0;
  double time_s = 0;
};

struct Calibration {
  std::string gpu;            // built-in GPU name the points were measured on
  std::string measured_with;  // the command that produced them
  std::vector<CalibrationPoint> points;
  Efficiency efficiency;  // fitted
};

// Fits factors to `points`, starting from `start`; classes or bounds without
// points keep their starting factor. Factors are capped at 1: no point beats
// the peak FLOP rate (ParseCalibrationPoints refuses one), but a memory-bound
// point may beat HBM from L2, and the roofline prices HBM, so such a class
// is priced at HBM speed and the profile's measured layers correct the rest.
Efficiency FitEfficiency(const std::vector<CalibrationPoint>& points, const GpuSpec& gpu,
                         const Efficiency& start = Efficiency());

// Reads a calibration YAML file and fits it. Throws loom::Error naming file,
// line and field on bad input.
Calibration LoadCalibration(const std::string& path);
Calibration ParseCalibration(const std::string& yaml_text, const std::string& file);
// The list of {op, flops, bytes, time_s, label} at `field` of a spec file
// (calibration `points`, profile `ops`): non-empty, every point valid, and
// none faster than `gpu`'s peak FLOP rate (at the precision it ran in) allows.
// Points faster than HBM are accepted: a small operand served from L2 is.
std::vector<CalibrationPoint> ParseCalibrationPoints(const YAML::Node& list, const std::string& file,
                                                     const std::string& field, const GpuSpec& gpu);

}  // namespace loom
