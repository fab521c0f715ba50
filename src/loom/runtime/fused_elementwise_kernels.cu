// The CUDA kernels behind fused_elementwise.h: SwiGLU and rotary positions,
// each one pass over its tensors. Only CUDA's own headers here (no ATen): the
// host side (fused_elementwise.cpp) hands raw pointers, sizes and the stream.
// Every value is rounded where transformers' composed ops round it (bf16 and
// fp16 products and sums computed in fp32, each stored in the tensor's type),
// so a kernel's output equals the composed form's up to the compiler's
// choice of fused multiply-adds (the last bit of a value, rarely).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "loom/runtime/fused_elementwise_kernels.h"

namespace loom::runtime::cuda_kernels {

namespace {

template <typename T>
__device__ __forceinline__ float ToFloat(T v) {
  return static_cast<float>(v);
}
template <>
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <>
__device__ __forceinline__ float ToFloat(__half v) {
  return __half2float(v);
}
template <typename T>
__device__ __forceinline__ T FromFloat(float v) {
  return static_cast<T>(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat(float v) {
  return __float2bfloat16(v);
}
template <>
__device__ __forceinline__ __half FromFloat(float v) {
  return __float2half(v);
}
// v rounded to T and back: the value a tensor of type T would hold.
template <typename T>
__device__ __forceinline__ float Round(float v) {
  return ToFloat(FromFloat<T>(v));
}

// V values of T loaded or stored as one aligned access.
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};
template <typename T, int V>
__device__ __forceinline__ Pack<T, V> Load(const T* p) {
  return *reinterpret_cast<const Pack<T, V>*>(p);
}
template <typename T, int V>
__device__ __forceinline__ void Store(T* p, const Pack<T, V>& pack) {
  *reinterpret_cast<Pack<T, V>*>(p) = pack;
}

// ATen's CUDA SiLU and its backward's sigmoid, in their opmath type (float),
// written as ATen writes them (x / (1 + exp(-x)), not x * sigmoid(x)).
__device__ __forceinline__ float Silu(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float Sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// out = silu(gate) * up, silu rounded to T first (ACT2FN then the product).
template <typename T, int V>
__global__ void SwigluForward(const T* gate, const T* up, T* out, int64_t rows, int64_t cols, int64_t gate_stride,
                              int64_t up_stride) {
  const int64_t packs = cols / V, total = rows * packs;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / packs, c = (i - r * packs) * V;
    const Pack<T, V> g = Load<T, V>(gate + r * gate_stride + c), u = Load<T, V>(up + r * up_stride + c);
    Pack<T, V> o;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      o.v[k] = FromFloat<T>(Round<T>(Silu(ToFloat(g.v[k]))) * ToFloat(u.v[k]));
    }
    Store<T, V>(out + r * cols + c, o);
  }
}

// d_up = g * silu(gate) and d_gate = silu'(gate) (g * up), as autograd
// computes them from the composed form (silu_backward of the rounded g * up).
template <typename T, int V>
__global__ void SwigluBackward(const T* grad, const T* gate, const T* up, T* grad_gate, T* grad_up, int64_t rows,
                               int64_t cols, int64_t gate_stride, int64_t up_stride) {
  const int64_t packs = cols / V, total = rows * packs;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / packs, c = (i - r * packs) * V;
    const Pack<T, V> dy = Load<T, V>(grad + r * cols + c);
    const Pack<T, V> g = Load<T, V>(gate + r * gate_stride + c), u = Load<T, V>(up + r * up_stride + c);
    Pack<T, V> dg, du;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float x = ToFloat(g.v[k]), d = ToFloat(dy.v[k]), s = Sigmoid(x);
      du.v[k] = FromFloat<T>(d * Round<T>(Silu(x)));
      dg.v[k] = FromFloat<T>(Round<T>(d * ToFloat(u.v[k])) * s * (1.0f + x * (1.0f - s)));
    }
    Store<T, V>(grad_gate + r * cols + c, dg);
    Store<T, V>(grad_up + r * cols + c, du);
  }
}

// x [tokens, heads, dim] rotated by cos/sin [tokens, dim] (transformers'
// apply_rotary_pos_emb: x cos + rotate_half(x) sin, each product rounded, then
// the sum). `transpose`: the backward, g cos + rotate_half^T(g sin).
template <typename T, int V>
__global__ void Rope(const T* x, const T* cos, const T* sin, T* out, int64_t tokens, int64_t heads, int64_t dim,
                     bool transpose) {
  const int64_t half = dim / 2, packs = half / V, total = tokens * heads * packs;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / packs, j = (i - row * packs) * V, t = row / heads;
    const T* xr = x + row * dim;
    const T* cr = cos + t * dim;
    const T* sr = sin + t * dim;
    const Pack<T, V> x1 = Load<T, V>(xr + j), x2 = Load<T, V>(xr + half + j);
    const Pack<T, V> c1 = Load<T, V>(cr + j), c2 = Load<T, V>(cr + half + j);
    const Pack<T, V> s1 = Load<T, V>(sr + j), s2 = Load<T, V>(sr + half + j);
    Pack<T, V> o1, o2;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float a = ToFloat(x1.v[k]), b = ToFloat(x2.v[k]);
      if (!transpose) {  // out1 = x1 c1 - x2 s1, out2 = x2 c2 + x1 s2
        o1.v[k] = FromFloat<T>(Round<T>(a * ToFloat(c1.v[k])) + Round<T>(-b * ToFloat(s1.v[k])));
        o2.v[k] = FromFloat<T>(Round<T>(b * ToFloat(c2.v[k])) + Round<T>(a * ToFloat(s2.v[k])));
      } else {  // d1 = g1 c1 + g2 s2, d2 = g2 c2 - g1 s1
        o1.v[k] = FromFloat<T>(Round<T>(a * ToFloat(c1.v[k])) + Round<T>(b * ToFloat(s2.v[k])));
        o2.v[k] = FromFloat<T>(Round<T>(b * ToFloat(c2.v[k])) - Round<T>(a * ToFloat(s1.v[k])));
      }
    }
    Store<T, V>(out + row * dim + j, o1);
    Store<T, V>(out + row * dim + half + j, o2);
  }
}

// Enough blocks to fill the GPU several times over; the loops stride the rest.
unsigned Blocks(int64_t work) {
  constexpr int64_t kMaxBlocks = 132 * 16;
  const int64_t blocks = (work + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks < kMaxBlocks ? blocks : kMaxBlocks));
}

void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// Calls f with T the element type and V values per access (16 bytes where
// `vectorized`, else one).
template <typename F>
void Dispatch(ElementType type, bool vectorized, F&& f) {
  switch (type) {
    case ElementType::kFloat32:
      return vectorized ? f(float{}, std::integral_constant<int, 4>{}) : f(float{}, std::integral_constant<int, 1>{});
    case ElementType::kBFloat16:
      return vectorized ? f(__nv_bfloat16{}, std::integral_constant<int, 8>{})
                        : f(__nv_bfloat16{}, std::integral_constant<int, 1>{});
    case ElementType::kFloat16:
      return vectorized ? f(__half{}, std::integral_constant<int, 8>{}) : f(__half{}, std::integral_constant<int, 1>{});
  }
}

}  // namespace

int ValuesPerAccess(ElementType type) { return type == ElementType::kFloat32 ? 4 : 8; }

void LaunchSwigluForward(ElementType type, bool vectorized, const void* gate, const void* up, void* out, int64_t rows,
                         int64_t cols, int64_t gate_stride, int64_t up_stride, cudaStream_t stream) {
  Dispatch(type, vectorized, [&](auto t, auto v) {
    using T = decltype(t);
    constexpr int V = decltype(v)::value;
    SwigluForward<T, V>
        <<<Blocks(rows * cols / V), kThreads, 0, stream>>>(static_cast<const T*>(gate), static_cast<const T*>(up),
                                                           static_cast<T*>(out), rows, cols, gate_stride, up_stride);
  });
  Check(cudaGetLastError(), "SwiGLU forward kernel");
}

void LaunchSwigluBackward(ElementType type, bool vectorized, const void* grad, const void* gate, const void* up,
                          void* grad_gate, void* grad_up, int64_t rows, int64_t cols, int64_t gate_stride,
                          int64_t up_stride, cudaStream_t stream) {
  Dispatch(type, vectorized, [&](auto t, auto v) {
    using T = decltype(t);
    constexpr int V = decltype(v)::value;
    SwigluBackward<T, V><<<Blocks(rows * cols / V), kThreads, 0, stream>>>(
        static_cast<const T*>(grad), static_cast<const T*>(gate), static_cast<const T*>(up), static_cast<T*>(grad_gate),
        static_cast<T*>(grad_up), rows, cols, gate_stride, up_stride);
  });
  Check(cudaGetLastError(), "SwiGLU backward kernel");
}

void LaunchRope(ElementType type, bool vectorized, const void* x, const void* cos, const void* sin, void* out,
                int64_t tokens, int64_t heads, int64_t dim, bool transpose, cudaStream_t stream) {
  Dispatch(type, vectorized, [&](auto t, auto v) {
    using T = decltype(t);
    constexpr int V = decltype(v)::value;
    Rope<T, V><<<Blocks(tokens * heads * dim / 2 / V), kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(cos), static_cast<const T*>(sin), static_cast<T*>(out), tokens,
        heads, dim, transpose);
  });
  Check(cudaGetLastError(), "rotary position kernel");
}

}  // namespace loom::runtime::cuda_kernels
