// Rotary position embeddings (RoPE) as transformers computes them for Llama,
// Mistral and Qwen: `LlamaRotaryEmbedding` (its default and "llama3" rope
// types, `_compute_default_rope_parameters` and `_compute_llama3_parameters`
// in modeling_rope_utils.py) and `apply_rotary_pos_emb` with `rotate_half`.
#pragma once

#include <torch/torch.h>

#include "loom/spec/layer.h"

namespace loom::runtime {

// The inverse frequencies of `rope` for heads of `head_dim`, [head_dim / 2],
// float32: theta^(-2i / head_dim), then Llama 3's scaling where the layer has it
// (wavelengths past original_max_positions / low_freq_factor divided by
// `factor`, those under original_max_positions / high_freq_factor kept, the
// band between interpolated).
torch::Tensor RopeInverseFrequencies(const Rope& rope, int64_t head_dim);

// cos and sin for `positions` ([rows], int64): [rows, head_dim] each, the
// frequencies repeated twice (transformers' `torch.cat((freqs, freqs), dim=-1)`),
// computed in float32 and cast to `dtype`.
struct RopeTables {
  torch::Tensor cos, sin;
};
RopeTables MakeRopeTables(const torch::Tensor& inverse_frequencies, const torch::Tensor& positions,
                          torch::ScalarType dtype);

// x [1, rows, heads, head_dim] rotated: x cos + rotate_half(x) sin, where
// rotate_half(x) = cat(-x[..., d/2:], x[..., :d/2]).
torch::Tensor ApplyRope(const torch::Tensor& x, const RopeTables& tables);

}  // namespace loom::runtime
