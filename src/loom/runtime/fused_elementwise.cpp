#include "loom/runtime/fused_elementwise.h"

#include <cstdint>

#include <stdexcept>

#ifdef LOOM_HAVE_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "loom/runtime/fused_elementwise_kernels.h"
#endif

namespace loom::runtime {

#ifdef LOOM_HAVE_CUDA
namespace {

using cuda_kernels::ElementType;

bool Supported(torch::ScalarType type) {
  return type == torch::kFloat || type == torch::kBFloat16 || type == torch::kHalf;
}

ElementType TypeOf(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kBFloat16:
      return ElementType::kBFloat16;
    case torch::kHalf:
      return ElementType::kFloat16;
    default:
      return ElementType::kFloat32;
  }
}

// 16-byte accesses where every row (and half row) starts on a 16-byte boundary.
bool Vectorized(ElementType type, int64_t row_values, std::initializer_list<const torch::Tensor*> tensors) {
  const int v = cuda_kernels::ValuesPerAccess(type);
  if (row_values % v != 0) return false;
  for (const torch::Tensor* t : tensors) {
    if (reinterpret_cast<std::uintptr_t>(t->data_ptr()) % 16 != 0) return false;
  }
  return true;
}

}  // namespace

bool FusedSwigluRuns(const torch::Tensor& gate, const torch::Tensor& up) {
  return gate.is_cuda() && up.device() == gate.device() && Supported(gate.scalar_type()) &&
         up.scalar_type() == gate.scalar_type() && gate.sizes() == up.sizes() && gate.dim() >= 1 &&
         gate.is_contiguous() && up.is_contiguous();
}

torch::Tensor FusedSwiglu(const torch::Tensor& gate, const torch::Tensor& up) {
  TORCH_CHECK(FusedSwigluRuns(gate, up), "FusedSwiglu: tensors the kernel does not take (ask FusedSwigluRuns)");
  const c10::cuda::CUDAGuard guard(gate.device());
  torch::Tensor out = torch::empty_like(gate);
  const int64_t cols = gate.size(-1), rows = gate.numel() / std::max<int64_t>(cols, 1);
  if (gate.numel() == 0) return out;
  const ElementType type = TypeOf(gate);
  cuda_kernels::LaunchSwigluForward(type, Vectorized(type, cols, {&gate, &up, &out}), gate.data_ptr(), up.data_ptr(),
                                    out.data_ptr(), rows, cols, cols, cols, c10::cuda::getCurrentCUDAStream());
  return out;
}

std::tuple<torch::Tensor, torch::Tensor> FusedSwigluBackward(const torch::Tensor& grad, const torch::Tensor& gate,
                                                             const torch::Tensor& up) {
  TORCH_CHECK(FusedSwigluRuns(gate, up), "FusedSwigluBackward: tensors the kernel does not take");
  const c10::cuda::CUDAGuard guard(gate.device());
  const torch::Tensor g = grad.to(gate.scalar_type()).contiguous();
  torch::Tensor grad_gate = torch::empty_like(gate), grad_up = torch::empty_like(up);
  const int64_t cols = gate.size(-1), rows = gate.numel() / std::max<int64_t>(cols, 1);
  if (gate.numel() == 0) return {grad_gate, grad_up};
  const ElementType type = TypeOf(gate);
  cuda_kernels::LaunchSwigluBackward(type, Vectorized(type, cols, {&g, &gate, &up, &grad_gate, &grad_up}), g.data_ptr(),
                                     gate.data_ptr(), up.data_ptr(), grad_gate.data_ptr(), grad_up.data_ptr(), rows,
                                     cols, cols, cols, c10::cuda::getCurrentCUDAStream());
  return {grad_gate, grad_up};
}

bool FusedRopeRuns(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  return x.is_cuda() && Supported(x.scalar_type()) && x.dim() == 4 && x.size(0) == 1 && x.size(3) % 2 == 0 &&
         x.is_contiguous() && cos.device() == x.device() && sin.device() == x.device() &&
         cos.scalar_type() == x.scalar_type() && sin.scalar_type() == x.scalar_type() && cos.dim() == 2 &&
         cos.sizes() == sin.sizes() && cos.size(0) == x.size(1) && cos.size(1) == x.size(3) && cos.is_contiguous() &&
         sin.is_contiguous();
}

torch::Tensor FusedRope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin, bool transpose) {
  const torch::Tensor in = x.to(cos.scalar_type()).contiguous();  // a backward's gradient may come in another layout
  TORCH_CHECK(FusedRopeRuns(in, cos, sin), "FusedRope: tensors the kernel does not take (ask FusedRopeRuns)");
  const c10::cuda::CUDAGuard guard(in.device());
  torch::Tensor out = torch::empty_like(in);
  if (in.numel() == 0) return out;
  const ElementType type = TypeOf(in);
  const int64_t dim = in.size(3);
  cuda_kernels::LaunchRope(type, Vectorized(type, dim / 2, {&in, &cos, &sin, &out}), in.data_ptr(), cos.data_ptr(),
                           sin.data_ptr(), out.data_ptr(), in.size(1), in.size(2), dim, transpose,
                           c10::cuda::getCurrentCUDAStream());
  return out;
}

#else  // the CPU build: the composed forms run everywhere

bool FusedSwigluRuns(const torch::Tensor&, const torch::Tensor&) { return false; }
torch::Tensor FusedSwiglu(const torch::Tensor&, const torch::Tensor&) {
  throw std::logic_error("FusedSwiglu: this build has no CUDA kernels (ask FusedSwigluRuns)");
}
std::tuple<torch::Tensor, torch::Tensor> FusedSwigluBackward(const torch::Tensor&, const torch::Tensor&,
                                                             const torch::Tensor&) {
  throw std::logic_error("FusedSwigluBackward: this build has no CUDA kernels");
}
bool FusedRopeRuns(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&) { return false; }
torch::Tensor FusedRope(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, bool) {
  throw std::logic_error("FusedRope: this build has no CUDA kernels (ask FusedRopeRuns)");
}

#endif

}  // namespace loom::runtime
