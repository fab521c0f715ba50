// The CUDA build (`make cuda-build`, issue 39): what `loom --version` says of
// the build, and the tests that need a GPU. `.ci/run` compiles, links and runs
// these in the CUDA build on a machine with no GPU, where the GPU tests skip
// with a message saying so; on a lent GPU machine they run.
#include <gtest/gtest.h>
#include <torch/version.h>
#include <unistd.h>

#include <string>

#include "loom/runtime/fused_elementwise.h"
#include "loom/runtime/layer_ops.h"
#include "loom/runtime/rotary.h"
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

// The runtime's CUDA kernels (runtime/fused_elementwise.h) against the
// composed torch ops they replace, forward and backward, in bf16 and fp32,
// at widths with and without 16-byte accesses: equal up to one unit in the
// last place of a few values (the compiler's fused multiply-adds). On the CPU
// (any build) the kernels take nothing and the composed forms run.
TEST(CudaBuild, FusedKernelsEqualTheComposedForms) {
  const torch::Tensor cpu = torch::randn({4, 8});
  EXPECT_FALSE(runtime::FusedSwigluRuns(cpu, cpu));
  EXPECT_FALSE(runtime::FusedRopeRuns(cpu.view({1, 4, 1, 8}), cpu, cpu));
  SKIP_UNLESS_GPU();
  torch::manual_seed(0);
  for (torch::ScalarType type : {torch::kBFloat16, torch::kFloat}) {
    const double tol = type == torch::kFloat ? 1e-6 : 1e-2;  // one bf16 ulp at |x| ~ 1
    const auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(type);
    for (int64_t cols : {64, 36}) {  // 36: no 16-byte accesses
      const torch::Tensor gate = torch::randn({3, 5, cols}, opts).requires_grad_(true);
      const torch::Tensor up = torch::randn({3, 5, cols}, opts).requires_grad_(true);
      const torch::Tensor g = torch::randn({3, 5, cols}, opts);
      ASSERT_TRUE(runtime::FusedSwigluRuns(gate, up));
      const torch::Tensor fused = runtime::MlpActivation(Activation::kSilu, gate, up);
      const auto fused_grads = torch::autograd::grad({fused}, {gate, up}, {g});
      const torch::Tensor composed = torch::silu(gate) * up;
      const auto composed_grads = torch::autograd::grad({composed}, {gate, up}, {g});
      EXPECT_TRUE(torch::allclose(fused, composed, tol, tol)) << cols;
      EXPECT_TRUE(torch::allclose(fused_grads[0], composed_grads[0], tol, tol)) << cols;
      EXPECT_TRUE(torch::allclose(fused_grads[1], composed_grads[1], tol, tol)) << cols;
      EXPECT_GT((fused == composed).to(torch::kFloat).mean().item<double>(), 0.99) << "mostly bit-equal";
    }
    for (int64_t dim : {64, 12}) {  // 12: half rows of 6 values, no 16-byte accesses
      const int64_t tokens = 7, heads = 3;
      const torch::Tensor inv = runtime::RopeInverseFrequencies(Rope{.theta = 10000}, dim);
      const runtime::RopeTables tables =
          runtime::MakeRopeTables(inv, torch::arange(tokens, torch::kLong).to(torch::kCUDA), type);
      const torch::Tensor x = torch::randn({1, tokens, heads, dim}, opts).requires_grad_(true);
      const torch::Tensor g = torch::randn({1, tokens, heads, dim}, opts);
      ASSERT_TRUE(runtime::FusedRopeRuns(x, tables.cos, tables.sin));
      const torch::Tensor fused = runtime::ApplyRope(x, tables);
      const torch::Tensor fused_grad = torch::autograd::grad({fused}, {x}, {g})[0];
      // transformers' apply_rotary_pos_emb: x cos + rotate_half(x) sin.
      const torch::Tensor rotated = torch::cat({-x.slice(-1, dim / 2), x.slice(-1, 0, dim / 2)}, -1);
      const torch::Tensor composed =
          x * tables.cos.unsqueeze(1).unsqueeze(0) + rotated * tables.sin.unsqueeze(1).unsqueeze(0);
      const torch::Tensor composed_grad = torch::autograd::grad({composed}, {x}, {g})[0];
      EXPECT_TRUE(torch::allclose(fused, composed, tol, tol)) << dim;
      EXPECT_TRUE(torch::allclose(fused_grad, composed_grad, tol, tol)) << dim;
    }
  }
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
