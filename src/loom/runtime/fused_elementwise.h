// One-pass GPU kernels for two elementwise parts of a transformer layer that
// ATen has no fused operator for: a gated MLP's SiLU(gate) * up (Megatron's
// fused bias-SwiGLU) and rotary positions (its fused RoPE). Composed of torch
// ops, SwiGLU's forward and backward run ~6 kernels over tokens x ffn_hidden
// values and RoPE's ~15 over the queries and keys; on a real-size LLaVA these
// were a measurable share of a bf16 step (docs/results/runtime.md, "On a GPU").
// Values equal the composed forms' (fused_elementwise_kernels.cu rounds where
// they round; CudaBuild.FusedKernelsEqualTheComposedForms). Only in the CUDA build, only for CUDA tensors:
// callers ask *Runs first and keep the composed form otherwise (every CPU run).
// Torch types: runtime .cpp files and tests only.
#pragma once

#include <torch/torch.h>

#include <tuple>

namespace loom::runtime {

// gate and up of one shape and floating type, contiguous, on a GPU of the CUDA build.
bool FusedSwigluRuns(const torch::Tensor& gate, const torch::Tensor& up);
// silu(gate) * up, silu rounded to the tensors' type first (transformers'
// act_fn(gate_proj(x)) * up_proj(x)).
torch::Tensor FusedSwiglu(const torch::Tensor& gate, const torch::Tensor& up);
// (d gate, d up) of FusedSwiglu for the output's gradient `grad`.
std::tuple<torch::Tensor, torch::Tensor> FusedSwigluBackward(const torch::Tensor& grad, const torch::Tensor& gate,
                                                             const torch::Tensor& up);

// x [1, T, heads, dim] contiguous with cos and sin [T, dim] of its type, on a GPU of the CUDA build.
bool FusedRopeRuns(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);
// x cos + rotate_half(x) sin (transformers' apply_rotary_pos_emb); `transpose`:
// its backward for the output's gradient x, g cos + rotate_half^T(g sin).
torch::Tensor FusedRope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin, bool transpose);

}  // namespace loom::runtime
