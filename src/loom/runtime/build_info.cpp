#include "loom/runtime/build_info.h"

#include <fmt/format.h>
#include <torch/version.h>
#ifdef LOOM_HAVE_CUDA
#include <cuda.h>  // CUDA_VERSION: the toolkit the CUDA build compiled against
#endif

namespace loom::runtime {

std::string RuntimeBuild() {
#ifdef LOOM_HAVE_CUDA
  return fmt::format("libtorch {} with CUDA {}.{} and NCCL", TORCH_VERSION, CUDA_VERSION / 1000,
                     (CUDA_VERSION % 1000) / 10);
#else
  return fmt::format("libtorch {}, CPU only (no CUDA in this build)", TORCH_VERSION);
#endif
}

}  // namespace loom::runtime
