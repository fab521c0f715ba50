#include "loom/spec/gpu.h"

#include <fmt/format.h>

#include "loom/error.h"

namespace loom {

namespace {
constexpr double kT = 1e12;
constexpr double kG = 1e9;
constexpr int64_t kGiB = int64_t{1} << 30;
}  // namespace

// Datasheet numbers (NVIDIA product briefs): dense BF16 tensor throughput,
// memory bandwidth and capacity, SM count, NVLink per direction. Sources and
// the capacity convention are in docs/cost-model.md.
const std::vector<GpuSpec>& BuiltinGpus() {
  static const std::vector<GpuSpec> gpus = {
      // A40: GDDR6 48 GB, NVLink bridge between pairs (112.5 GB/s both ways), PCIe 4.0.
      {"a40", 149.7 * kT, 696 * kG, 48 * kGiB, 84, 56.25 * kG, 32 * kG, 74.8 * kT, 37.4 * kT},
      // A800 SXM 80GB: A100 with NVLink capped at 400 GB/s both ways.
      {"a800", 312 * kT, 2039 * kG, 80 * kGiB, 108, 200 * kG, 32 * kG, 156 * kT, 19.5 * kT},
      // H800 SXM: H100 compute, NVLink capped at 400 GB/s both ways.
      {"h800", 989.4 * kT, 3350 * kG, 80 * kGiB, 132, 200 * kG, 64 * kG, 494.7 * kT, 66.9 * kT},
      // H100 SXM5 80GB: NVLink 4, 900 GB/s both ways.
      {"h100", 989.4 * kT, 3350 * kG, 80 * kGiB, 132, 450 * kG, 64 * kG, 494.7 * kT, 66.9 * kT},
      // H200 SXM 141GB HBM3e.
      {"h200", 989.4 * kT, 4800 * kG, 141 * int64_t{1000000000}, 132, 450 * kG, 64 * kG, 494.7 * kT, 66.9 * kT},
  };
  return gpus;
}

double PeakFlops(const GpuSpec& gpu, Precision precision) {
  switch (precision) {
    case Precision::kBf16:
    case Precision::kFp16:
      return gpu.peak_flops;
    case Precision::kTf32:
      return gpu.peak_tf32_flops;
    case Precision::kFp32:
      return gpu.peak_fp32_flops;
  }
  return gpu.peak_flops;
}

GpuSpec AtPrecision(GpuSpec gpu, Precision precision) {
  gpu.peak_flops = PeakFlops(gpu, precision);
  return gpu;
}

const GpuSpec& FindGpu(const std::string& name) {
  std::string valid;
  for (const auto& g : BuiltinGpus()) {
    if (g.name == name) {
      return g;
    }
    valid += (valid.empty() ? "" : ", ") + g.name;
  }
  throw Error(fmt::format("unknown GPU '{}'; valid: {}", name, valid));
}

}  // namespace loom
