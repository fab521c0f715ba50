// GpuSpec: the datasheet numbers the roofline cost model needs for one device.
// Peaks are dense (no sparsity): BF16/FP16 and TF32 on tensor cores, FP32 on
// the CUDA cores; bandwidths are bytes per second; NVLink bandwidth is per GPU,
// per direction.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/spec/precision.h"

namespace loom {

struct GpuSpec {
  std::string name;
  double peak_flops = 0;       // dense BF16/FP16 tensor FLOP/s
  double hbm_bytes_per_s = 0;  // device memory bandwidth
  int64_t mem_bytes = 0;       // usable device memory
  int sm_count = 0;
  double nvlink_bytes_per_s = 0;  // per GPU per direction; 0 when the GPU has none
  double pcie_bytes_per_s = 0;    // host link per direction
  double peak_tf32_flops = 0;     // dense TF32 tensor FLOP/s
  double peak_fp32_flops = 0;     // FP32 FLOP/s (no tensor cores)
};

// The peak FLOP/s of `gpu` in `precision`.
double PeakFlops(const GpuSpec& gpu, Precision precision);
// `gpu` with peak_flops set to its peak in `precision` (what the roofline divides by).
GpuSpec AtPrecision(GpuSpec gpu, Precision precision);

// The built-in GPUs (a40, a800, h800, h100, h200), in that order.
const std::vector<GpuSpec>& BuiltinGpus();
// The built-in GPU called `name`; throws loom::Error listing the valid names.
const GpuSpec& FindGpu(const std::string& name);

}  // namespace loom
