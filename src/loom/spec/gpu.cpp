#include "loom/spec/gpu.h"

#include <fmt/format.h>

#include "loom/did_you_mean.h"
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
      // B200 in an HGX B200 board (NVIDIA HGX datasheet, per GPU = the 8-GPU totals / 8,
      // dense = the "with sparsity" figures / 2): BF16 18 PF / 8, TF32 9 PF / 8, FP32
      // 600 TF / 8; HBM3e 1.44 TB / 8 = 180 GB at 64 TB/s / 8; NVLink 5 1.8 TB/s both
      // ways; 148 SMs; PCIe 5.0 to the host.
      {"b200", 2250 * kT, 8000 * kG, 180 * int64_t{1000000000}, 148, 900 * kG, 64 * kG, 1125 * kT, 75 * kT},
      // GB200 in a GB200 NVL72 rack (its datasheet, per GPU = the rack's totals / 72, dense
      // = "with sparsity" / 2): BF16 360 PF / 72 / 2, TF32 180 PF / 72 / 2, FP32 5,760 TF /
      // 72; HBM3e 13.4 TB / 72 = 186 GB at 576 TB/s / 72; NVLink 5 130 TB/s / 72 both ways,
      // one NVLink domain over the 72; NVLink-C2C to its Grace CPU (900 GB/s both ways) as
      // the host link; SMs as B200's.
      {"gb200", 2500 * kT, 8000 * kG, 186 * int64_t{1000000000}, 148, 900 * kG, 450 * kG, 1250 * kT, 80 * kT},
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
  std::vector<std::string> names;
  for (const auto& g : BuiltinGpus()) {
    if (g.name == name) {
      return g;
    }
    valid += (valid.empty() ? "" : ", ") + g.name;
    names.push_back(g.name);
  }
  throw Error(fmt::format("unknown GPU '{}'; valid: {}{}", name, valid, DidYouMean(name, names)));
}

}  // namespace loom
