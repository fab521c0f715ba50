// Attention under a Cornstarch bitfield mask (data/attention_mask.h; seed 004
// §3.4.2) on libtorch tensors q [1, T, heads, d] and k, v [1, T, kv_heads, d]
// (the runtime's layout: one packed sequence; grouped-query heads as they
// are, heads a multiple of kv_heads). Two implementations that must agree,
// forward and backward:
//   - the reference expands the mask to a dense T x T matrix (MayAttend) and
//     takes K/V with every head (ExpandKvHeads);
//   - the blocked path never builds it: per query block of `block_tokens`
//     tokens it gathers only the KV blocks holding a key some query of the
//     block may read (KvBlocks) and masks inside that window, so its work and
//     memory grow with the mask's non-empty blocks, not T^2 (Cornstarch's
//     Triton kernel skips fully masked tiles the same way).
//     The rule inside a window is evaluated on the tensors' device from the
//     fields and document ids (one int64 each per token), beside the matmuls;
//     the reference evaluates MayAttend on the host. Its backward keeps q,
//     k, v, the output and (on a CPU) the log-sum-exp, none of the windows:
//     it gathers each again (bitfield_attention.cpp BlockedAttention).
// Every query reads at least itself under the mask's rule, so no row is empty.
// Torch types: include from runtime .cpp files and tests only.
#pragma once

#include <torch/torch.h>

#include "loom/data/attention_mask.h"
#include "loom/runtime/attention.h"

namespace loom::runtime {

torch::Tensor BitfieldAttentionReference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                         const BitfieldMask& mask);

// Throws loom::Error when the mask's length is not T or block_tokens < 1.
// `kv_blocks` as for BitfieldAttentionRows below.
torch::Tensor BitfieldAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const BitfieldMask& mask, int64_t block_tokens,
                                const std::vector<std::vector<int64_t>>* kv_blocks = nullptr,
                                AttentionBackward backward = AttentionBackward::kDevice);

// The blocked path for some of the queries: q [1, rows.size(), heads, d] are
// the queries at positions `rows` (ascending) of the mask's sequence, k and v
// [1, T, heads, d] every key (a CP rank's queries over all-gathered K/V,
// runtime/context_parallel.h). Consecutive runs of `block_tokens` of `rows`
// visit the union of their positions' KV blocks. Throws loom::Error when a row
// is outside the mask or rows are not ascending.
// `kv_blocks`, if given, is KvBlocks(mask, block_tokens) computed once for
// every layer attending under the same mask.
torch::Tensor BitfieldAttentionRows(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    const BitfieldMask& mask, const std::vector<int64_t>& rows, int64_t block_tokens,
                                    const std::vector<std::vector<int64_t>>* kv_blocks = nullptr,
                                    AttentionBackward backward = AttentionBackward::kDevice);

}  // namespace loom::runtime
