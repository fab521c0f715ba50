// Reads the SM-partition measurements of ../shared/measurements/h100 (a copy
// is in tests/data/h100/) into the fitting points of cost/sm_sharing.h:
//   sm_surface_small.json   small module stacks on 8..132 SMs (Mosaic's surface)
//   sm_scaling_large.json   a vit-huge and a llama3-1b layer on 8..132 SMs
//   colocation_small.json   pairs of small stacks on disjoint green contexts
//   colocation_large.json   the two large layers on disjoint green contexts
// Bandwidth utilisation B (Eq. 8) is not in the files: it is the bytes Loom's
// cost model moves for the module's forward + backward (cost/layer_work.h)
// over its measured alone time and the GPU's HBM bandwidth.
#pragma once

#include <string>
#include <vector>

#include "loom/cost/sm_sharing.h"
#include "loom/spec/gpu.h"

namespace loom {

struct SmMeasurements {
  std::vector<SmScalingPoint> scaling;          // transformer stacks only (the GEMM and copy rows are left out)
  std::vector<InterferencePoint> interference;  // one per module of each co-located pair
  // Per interference point: layers one host thread launched for both modules
  // over the module's alone time (its host_slowdown is floor x this - 1 once
  // the floor is fitted: SetHostSlowdowns).
  std::vector<double> launched_layers_per_s;
  void SetHostSlowdowns(double launch_floor_s_per_layer);
};

// Throws loom::Error naming the file and the row on a missing file or field.
SmMeasurements LoadSmMeasurements(const std::string& dir, const GpuSpec& gpu);

// Both fits and a report: per module the scaling fit error, and the R^2 of no,
// additive and full interference (what `loom fit-sm` prints; the profile's
// sm_sharing block is the last lines).
struct SmSharingReport {
  SmScalingFit scaling;
  InterferenceFit interference;
  SmSharing law;  // scaling + full interference: what a profile carries
  std::string text;
};
SmSharingReport FitSmSharing(const std::string& dir, const GpuSpec& gpu);

}  // namespace loom
