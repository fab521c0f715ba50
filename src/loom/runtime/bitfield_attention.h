// Attention under a Cornstarch bitfield mask (data/attention_mask.h; seed 004
// §3.4.2) on libtorch tensors q, k, v of [1, T, heads, d] (the runtime's
// layout: one packed sequence, GQA already expanded). Two implementations
// that must agree, forward and backward:
//   - the reference expands the mask to a dense T x T matrix (MayAttend);
//   - the blocked path never builds it: per query block of `block_tokens`
//     tokens it gathers only the KV blocks holding a key some query of the
//     block may read (KvBlocks) and masks inside that window, so its work and
//     memory grow with the mask's non-empty blocks, not T^2 (Cornstarch's
//     Triton kernel skips fully masked tiles the same way).
// Every query reads at least itself under the mask's rule, so no row is empty.
// Torch types: include from runtime .cpp files and tests only.
#pragma once

#include <torch/torch.h>

#include "loom/data/attention_mask.h"

namespace loom::runtime {

torch::Tensor BitfieldAttentionReference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                         const BitfieldMask& mask);

// Throws loom::Error when the mask's length is not T or block_tokens < 1.
torch::Tensor BitfieldAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const BitfieldMask& mask, int64_t block_tokens);

}  // namespace loom::runtime
