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
#include <optional>
#include <tuple>
#include <vector>

namespace loom::runtime {

// How the paths that do not call SDPA whole (unequal packed sequences,
// bitfield windows) run their backward: the device's own (on a CPU the flash
// kernel's backward operator, elsewhere autograd), or autograd on any device,
// so that tests run a GPU's path on a CPU.
enum class AttentionBackward { kDevice, kAutograd };

// q [1, T, heads, d], k and v [1, T, kv_heads, d] (heads a multiple of
// kv_heads: grouped-query attention, each K/V head serving heads / kv_heads
// consecutive query heads, as transformers' repeat_kv) packed as `lengths`
// (summing to T); causal or bidirectional inside each sequence, scale d^-1/2.
// Returns [1, T, heads, d]. Sequences of equal length run as one batch; unequal
// ones padded into one batch while that at most doubles the work, else one at
// a time.
// On a CPU the backward keeps the packed q, k, v, output and log-sum-exp
// (PyTorch's CPU flash kernel called directly); on a GPU SDPA's autograd keeps
// the padded batch's copies as well (docs/runtime.md "Attention").
torch::Tensor Attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                     const std::vector<int64_t>& lengths, bool causal,
                     AttentionBackward backward = AttentionBackward::kDevice);

// PyTorch's CPU flash kernel called directly (the operators SDPA dispatches to
// on a CPU), for the autograd functions that keep less than SDPA's own
// backward would: q [n, heads, L, d], k and v [n, kv_heads, S, d] (grouped-query
// heads taken as they are); `mask` additive, broadcastable to [n, heads, L, S].
// Returns the output [n, heads, L, d] and its fp32 log-sum-exp [n, heads, L].
std::tuple<torch::Tensor, torch::Tensor> FlashCpuForward(const torch::Tensor& q, const torch::Tensor& k,
                                                         const torch::Tensor& v, bool causal,
                                                         const std::optional<torch::Tensor>& mask);
// dq, dk, dv for FlashCpuForward's output gradient `dout`.
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> FlashCpuBackward(
    const torch::Tensor& dout, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
    const torch::Tensor& out, const torch::Tensor& lse, bool causal, const std::optional<torch::Tensor>& mask);
// An additive mask (0 or -inf, `like`'s dtype) from a boolean one.
torch::Tensor AdditiveMask(const torch::Tensor& allowed, const torch::Tensor& like);

// t [1, T, kv_heads, d] with each head repeated heads / kv_heads times in
// place (transformers' repeat_kv), for the paths that need every head's K/V.
torch::Tensor ExpandKvHeads(const torch::Tensor& t, int64_t heads);

}  // namespace loom::runtime
