// Softmax attention inside each packed sequence through PyTorch's fused
// scaled_dot_product_attention (SDPA): no L x L scores are kept for the
// backward, only the output and its fp32 log-sum-exp per query and head, which
// is what the simulator's memory model prices (cost/layer_work.h
// ActivationBytes: flash attention's statistics). Which kernel runs is
// PyTorch's choice for the build and device: FlashAttentionForCpu on a CPU
// (masks and grouped-query heads included), flash or memory-efficient on a
// GPU. Torch types: include from runtime .cpp files and tests only.
//
// Where the runtime does not come here (docs/runtime.md "Attention"):
// Cornstarch's bitfield masks attend block by block (bitfield_attention.h, each
// block one SDPA call under its window's mask), and context parallelism's ring
// attention combines blocks by their log-sum-exp in its own autograd function
// (context_parallel.h), which recomputes the blocks in its backward instead of
// keeping them.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace loom::runtime {

// q [1, T, heads, d], k and v [1, T, kv_heads, d] (heads a multiple of
// kv_heads: grouped-query attention, each K/V head serving heads / kv_heads
// consecutive query heads, as transformers' repeat_kv) packed as `lengths`
// (summing to T); causal or bidirectional inside each sequence, scale d^-1/2.
// Returns [1, T, heads, d]. Sequences of equal length run as one batch; unequal
// ones padded into one batch while that at most doubles the work, else one at
// a time.
torch::Tensor Attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                     const std::vector<int64_t>& lengths, bool causal);

// t [1, T, kv_heads, d] with each head repeated heads / kv_heads times in
// place (transformers' repeat_kv), for the paths that need every head's K/V.
torch::Tensor ExpandKvHeads(const torch::Tensor& t, int64_t heads);

}  // namespace loom::runtime
