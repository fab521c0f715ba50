// The CUDA build (`make cuda-build`, issue 39): what `loom --version` says of
// the build, and the tests that need a GPU. `.ci/run` compiles, links and runs
// these in the CUDA build on a machine with no GPU, where the GPU tests skip
// with a message saying so; on a lent GPU machine they run.
#include <gtest/gtest.h>
#include <torch/version.h>
#include <unistd.h>

#include <string>

#include "loom/spec/cluster.h"
#include "reference.h"
#include "test_util.h"

namespace loom {
namespace {

using namespace runtime_test;

#ifdef LOOM_HAVE_CUDA
constexpr bool kCudaBuild = true;
#else
constexpr bool kCudaBuild = false;
#endif

// Skips the calling test unless this is the CUDA build on a machine with a GPU.
#define SKIP_UNLESS_GPU()                                                                             \
  do {                                                                                                \
    if (!kCudaBuild) GTEST_SKIP() << "needs the CUDA build (make cuda-build); this is the CPU build"; \
    if (access("/dev/nvidia0", F_OK) != 0) {                                                          \
      GTEST_SKIP() << "needs a GPU: this machine has none (/dev/nvidia0 is absent)";                  \
    }                                                                                                 \
  } while (0)

// `loom --version` names the libtorch the binary was built with (the one these
// tests compiled against) and whether CUDA is in the build; the CUDA build
// starts without a GPU driver (it loads the driver API only when asked).
TEST(CudaBuild, VersionNamesLibtorchAndCuda) {
  auto [code, out] = LoomCli("--version");
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find(std::string("libtorch ") + TORCH_VERSION), std::string::npos) << out;
  EXPECT_EQ(TORCH_VERSION_MAJOR, 2) << "Loom builds against PyTorch 2.x (requirements.txt)";
  if (kCudaBuild) {
    EXPECT_NE(out.find("with CUDA"), std::string::npos) << out;
  } else {
    EXPECT_NE(out.find("CPU only"), std::string::npos) << out;
  }
}

// One rank on the GPU trains the tiny LLM to the single-process CPU reference's
// losses and parameters (fp32; NCCL and the CUDA caching allocator in the path).
TEST(CudaBuild, OneGpuTrainsLikeTheCpuReference) {
  SKIP_UNLESS_GPU();
  const TinyRun s;
  const Reference r = TrainInOneProcess(s);
  const Cluster one = LoadCluster("h100:1x1");
  const std::string plan = MegatronPlanFile(s, ScheduleKind::kOneFOneB, 1, "cuda-1gpu.json", 1, 1, 1, &one);
  ExpectRunMatches(
      r, "run --model " + s.model_path + " --cluster h100:1x1 " + s.data_args + " --plan " + plan + " --device cuda");
}

// The CUDA build still runs a CPU job like the CPU build, on any machine.
TEST(CudaBuild, CpuRunOfTheCudaBuildMatchesTheReference) {
  const TinyRun s;
  const Reference r = TrainInOneProcess(s);
  const std::string plan = MegatronPlanFile(s, ScheduleKind::kOneFOneB, 1, "cuda-build-cpu.json");
  ExpectRunMatches(r, "run --model " + s.model_path + " --cluster h100:1x2 " + s.data_args + " --plan " + plan);
}

}  // namespace
}  // namespace loom
