#include "loom/cost/device_time.h"

#include <fmt/format.h>

#include <algorithm>

#include "loom/error.h"

namespace loom {

void Efficiency::Validate() const {
  static const char* kNames[] = {"gemm", "attention", "elementwise", "conv"};
  for (int c = 0; c < kNumOpClasses; ++c) {
    if (!(compute[c] > 0 && compute[c] <= 1)) {
      throw Error(fmt::format("efficiency.compute.{}: must be in (0, 1], got {}", kNames[c], compute[c]));
    }
    if (!(memory[c] > 0 && memory[c] <= 1)) {
      throw Error(fmt::format("efficiency.memory.{}: must be in (0, 1], got {}", kNames[c], memory[c]));
    }
  }
}

double OpTime_s(const OpWork& op, OpClass cls, const GpuSpec& gpu, const Efficiency& eff) {
  int c = static_cast<int>(cls);
  double compute_s = op.flops / (eff.compute[c] * gpu.peak_flops);
  double memory_s = op.bytes / (eff.memory[c] * gpu.hbm_bytes_per_s);
  return std::max(compute_s, memory_s);
}

double PhaseTime_s(const LayerWork& work, Phase phase, const GpuSpec& gpu, const Efficiency& eff) {
  double t = 0;
  for (int c = 0; c < kNumOpClasses; ++c) {
    t += OpTime_s(work.at(phase, static_cast<OpClass>(c)), static_cast<OpClass>(c), gpu, eff);
  }
  return t;
}

}  // namespace loom
