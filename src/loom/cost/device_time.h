// The roofline: an op class takes max(FLOPs / (eff_compute x peak),
// bytes / (eff_memory x HBM bandwidth)) on one GPU (PipeWeaver §4.1's SEMU
// roofline without the network term, which collectives.h prices). The
// efficiency factors say how close real kernels get to the datasheet; defaults
// and their sources are in docs/cost-model.md; calibration.h fits them to
// measurements.
#pragma once

#include <array>

#include "loom/cost/layer_work.h"
#include "loom/spec/gpu.h"

namespace loom {

struct Efficiency {
  // Fraction of peak FLOP/s reached, per op class (GEMM, attention, elementwise, conv).
  std::array<double, kNumOpClasses> compute = {0.75, 0.45, 1.0, 0.50};
  // Fraction of HBM bandwidth reached, per op class.
  std::array<double, kNumOpClasses> memory = {0.80, 0.80, 0.80, 0.80};

  // Throws loom::Error naming the field when a factor is outside (0, 1].
  void Validate() const;
};

double OpTime_s(const OpWork& op, OpClass cls, const GpuSpec& gpu, const Efficiency& eff);
// Sum over op classes of one phase of a layer's work.
double PhaseTime_s(const LayerWork& work, Phase phase, const GpuSpec& gpu, const Efficiency& eff);

}  // namespace loom
