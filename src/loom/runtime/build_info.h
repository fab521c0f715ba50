// What the runtime was built with, for `loom --version`: the libtorch (from the
// PyTorch in requirements.txt) and whether CUDA is in the build (LOOM_CUDA).
#pragma once

#include <string>

namespace loom::runtime {

// "libtorch 2.11.0, CPU only (no CUDA in this build)" or
// "libtorch 2.11.0 with CUDA 13.0 and NCCL".
std::string RuntimeBuild();

}  // namespace loom::runtime
