// The CUDA driver API functions the runtime calls (green contexts:
// runtime/green_context.h), loaded from libcuda.so.1 when first asked rather
// than linked. CUDA builds only (LOOM_HAVE_CUDA).
//
// Why not linked: the CUDA build must start, and run CPU jobs and its tests, on
// machines with the CUDA toolkit but no GPU driver (CI's, `make cuda-build`),
// where a binary linked to libcuda.so.1 would not load. Why not PyTorch's own
// loader (c10/cuda/driver_api.h): its header includes NVML's, which the
// toolkit on those machines lacks. Each function is resolved through
// cuGetProcAddress at the CUDA version the build compiled against
// (CUDA_VERSION), so its prototype is the one cuda.h declares.
#pragma once

#ifdef LOOM_HAVE_CUDA
#include <cuda.h>

namespace loom::runtime {

struct CudaDriver {
  decltype(&cuInit) cuInit_ = nullptr;
  decltype(&cuGetErrorString) cuGetErrorString_ = nullptr;
  decltype(&cuDeviceGet) cuDeviceGet_ = nullptr;
  decltype(&cuDeviceGetDevResource) cuDeviceGetDevResource_ = nullptr;
  decltype(&cuDevSmResourceSplitByCount) cuDevSmResourceSplitByCount_ = nullptr;
  decltype(&cuDevResourceGenerateDesc) cuDevResourceGenerateDesc_ = nullptr;
  decltype(&cuGreenCtxCreate) cuGreenCtxCreate_ = nullptr;
  decltype(&cuGreenCtxDestroy) cuGreenCtxDestroy_ = nullptr;
  decltype(&cuGreenCtxStreamCreate) cuGreenCtxStreamCreate_ = nullptr;
};

// The driver's functions, loaded on the first call (a function-local constant
// after that); throws loom::Error naming what is missing: libcuda.so.1, or a
// function this driver does not have (green contexts need CUDA 12.4 or later).
const CudaDriver& Driver();

}  // namespace loom::runtime
#endif
