#include "loom/runtime/attention.h"

#include <algorithm>
#include <optional>

namespace loom::runtime {

namespace {

// SDPA on [n, L, heads, d] queries and [n, L, kv_heads, d] keys and values;
// `keys_valid` [n, L] (or undefined): the keys each sequence may read.
torch::Tensor Sdpa(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal,
                   const torch::Tensor& keys_valid) {
  const int64_t heads = q.size(2);
  torch::Tensor K = k, V = v;
  // Grouped-query heads go to the kernel as they are on a CPU (its flash
  // kernel takes them, with or without a mask). On a GPU K/V are expanded:
  // CUDA's memory-efficient kernel (the one for fp32, and for masks) takes no
  // GQA, and PyTorch would fall back to its math path, which keeps L x L.
  if (!q.is_cpu()) {
    K = ExpandKvHeads(k, heads);
    V = ExpandKvHeads(v, heads);
  }
  std::optional<torch::Tensor> mask;
  if (keys_valid.defined()) mask = keys_valid.view({keys_valid.size(0), 1, 1, keys_valid.size(1)});
  return at::scaled_dot_product_attention(q.transpose(1, 2), K.transpose(1, 2), V.transpose(1, 2), mask,
                                          /*dropout_p=*/0.0, causal, /*scale=*/std::nullopt,
                                          /*enable_gqa=*/K.size(2) != heads)
      .transpose(1, 2);
}

}  // namespace

torch::Tensor ExpandKvHeads(const torch::Tensor& t, int64_t heads) {
  return t.size(2) == heads ? t : t.repeat_interleave(heads / t.size(2), 2);
}

torch::Tensor Attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                     const std::vector<int64_t>& lengths, bool causal) {
  const int64_t heads = q.size(2), kv = k.size(2), d = q.size(3), T = q.size(1);
  const int64_t n = static_cast<int64_t>(lengths.size());
  const bool equal = std::all_of(lengths.begin(), lengths.end(), [&](int64_t l) { return l == lengths[0]; });
  if (equal) {
    const int64_t L = lengths[0];
    return Sdpa(q.reshape({n, L, heads, d}), k.reshape({n, L, kv, d}), v.reshape({n, L, kv, d}), causal, {})
        .reshape({1, T, heads, d});
  }
  // Unequal lengths: padded into one batch while that at most doubles the
  // attention work, else one sequence at a time. Few large products beat many
  // small ones (a CPU pays ~10 us per operation). Padding sits after each
  // sequence's end: causally no real query reaches it, so only bidirectional
  // attention needs a mask (of keys, [n, L], never L x L); the padded queries'
  // rows are dropped, so they get no gradient.
  const int64_t L = *std::max_element(lengths.begin(), lengths.end());
  double work = 0;
  for (int64_t l : lengths) work += static_cast<double>(l) * static_cast<double>(l);
  if (static_cast<double>(n * L * L) <= 2 * work) {
    std::vector<int64_t> slots;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < lengths[i]; ++j) slots.push_back(i * L + j);
    }
    const torch::Tensor index = torch::tensor(slots, torch::kLong).to(q.device());
    auto pad = [&](const torch::Tensor& t) {
      return torch::zeros({n * L, t.size(2), d}, t.options()).index_copy(0, index, t[0]).view({n, L, t.size(2), d});
    };
    torch::Tensor keys_valid;
    if (!causal) {
      keys_valid = (torch::arange(L, torch::kLong).view({1, L}) < torch::tensor(lengths, torch::kLong).view({n, 1}))
                       .to(q.device());
    }
    const torch::Tensor out = Sdpa(pad(q), pad(k), pad(v), causal, keys_valid);
    return out.reshape({n * L, heads, d}).index_select(0, index).view({1, T, heads, d});
  }
  std::vector<torch::Tensor> parts;
  int64_t off = 0;
  for (int64_t len : lengths) {
    parts.push_back(
        Sdpa(q.slice(1, off, off + len), k.slice(1, off, off + len), v.slice(1, off, off + len), causal, {}));
    off += len;
  }
  return torch::cat(parts, 1);
}

}  // namespace loom::runtime
