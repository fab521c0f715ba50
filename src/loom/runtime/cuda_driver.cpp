#include "loom/runtime/cuda_driver.h"

#ifdef LOOM_HAVE_CUDA
#include <dlfcn.h>
#include <fmt/format.h>

#include "loom/error.h"

namespace loom::runtime {

namespace {

// cuGetProcAddress as CUDA 12.0 and later export it.
using GetProcAddress = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

template <typename Fn>
void Resolve(GetProcAddress get, const char* name, Fn& out) {
  void* fn = nullptr;
  CUdriverProcAddressQueryResult found{};
  if (get(name, &fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &found) != CUDA_SUCCESS || fn == nullptr ||
      found != CU_GET_PROC_ADDRESS_SUCCESS) {
    throw Error(
        fmt::format("CUDA driver: this driver has no {} for CUDA {}.{} (green contexts need a driver for "
                    "CUDA 12.4 or later)",
                    name, CUDA_VERSION / 1000, (CUDA_VERSION % 1000) / 10));
  }
  out = reinterpret_cast<Fn>(fn);
}

CudaDriver Load() {
  // The library stays loaded for the process's life (never dlclose'd), as the
  // CUDA runtime keeps it.
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr)
    throw Error(fmt::format("CUDA driver: cannot load libcuda.so.1 ({}): no GPU driver here", dlerror()));
  auto get = reinterpret_cast<GetProcAddress>(dlsym(lib, "cuGetProcAddress_v2"));
  if (get == nullptr) throw Error("CUDA driver: libcuda.so.1 has no cuGetProcAddress_v2 (a driver older than CUDA 12)");
  CudaDriver d;
  Resolve(get, "cuInit", d.cuInit_);
  Resolve(get, "cuGetErrorString", d.cuGetErrorString_);
  Resolve(get, "cuDeviceGet", d.cuDeviceGet_);
  Resolve(get, "cuDeviceGetDevResource", d.cuDeviceGetDevResource_);
  Resolve(get, "cuDevSmResourceSplitByCount", d.cuDevSmResourceSplitByCount_);
  Resolve(get, "cuDevResourceGenerateDesc", d.cuDevResourceGenerateDesc_);
  Resolve(get, "cuGreenCtxCreate", d.cuGreenCtxCreate_);
  Resolve(get, "cuGreenCtxDestroy", d.cuGreenCtxDestroy_);
  Resolve(get, "cuGreenCtxStreamCreate", d.cuGreenCtxStreamCreate_);
  return d;
}

}  // namespace

const CudaDriver& Driver() {
  static const CudaDriver driver = Load();  // thread-safe initialisation; immutable after
  return driver;
}

}  // namespace loom::runtime
#endif
