// The launchers of fused_elementwise_kernels.cu, callable from host code
// without ATen in the CUDA source (fused_elementwise.h is the API to use).
// Pointers are device memory of `type`; rows of `cols` values, a row of gate
// (up) `gate_stride` (`up_stride`) values after the previous one; outputs and
// gradients contiguous. `vectorized`: every row start and `cols` (the half of
// `dim`) a multiple of ValuesPerAccess(type) values, pointers 16-byte aligned.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace loom::runtime::cuda_kernels {

enum class ElementType { kFloat32, kBFloat16, kFloat16 };

inline constexpr int kThreads = 256;

int ValuesPerAccess(ElementType type);

void LaunchSwigluForward(ElementType type, bool vectorized, const void* gate, const void* up, void* out, int64_t rows,
                         int64_t cols, int64_t gate_stride, int64_t up_stride, cudaStream_t stream);
void LaunchSwigluBackward(ElementType type, bool vectorized, const void* grad, const void* gate, const void* up,
                          void* grad_gate, void* grad_up, int64_t rows, int64_t cols, int64_t gate_stride,
                          int64_t up_stride, cudaStream_t stream);
void LaunchRope(ElementType type, bool vectorized, const void* x, const void* cos, const void* sin, void* out,
                int64_t tokens, int64_t heads, int64_t dim, bool transpose, cudaStream_t stream);

}  // namespace loom::runtime::cuda_kernels
