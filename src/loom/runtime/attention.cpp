#include "loom/runtime/attention.h"

#include <algorithm>
#include <limits>
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

std::tuple<torch::Tensor, torch::Tensor> FlashCpuForward(const torch::Tensor& q, const torch::Tensor& k,
                                                         const torch::Tensor& v, bool causal,
                                                         const std::optional<torch::Tensor>& mask) {
  return at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, /*dropout_p=*/0.0, causal, mask);
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> FlashCpuBackward(
    const torch::Tensor& dout, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
    const torch::Tensor& out, const torch::Tensor& lse, bool causal, const std::optional<torch::Tensor>& mask) {
  return at::_scaled_dot_product_flash_attention_for_cpu_backward(dout, q, k, v, out, lse, /*dropout_p=*/0.0, causal,
                                                                  mask);
}

torch::Tensor AdditiveMask(const torch::Tensor& allowed, const torch::Tensor& like) {
  return torch::zeros(allowed.sizes(), like.options())
      .masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity());
}

torch::Tensor ExpandKvHeads(const torch::Tensor& t, int64_t heads) {
  return t.size(2) == heads ? t : t.repeat_interleave(heads / t.size(2), 2);
}

namespace {

// Where unequal sequences go: padded into one batch [n, L] while that at most
// doubles the attention work, else one at a time. Few large products beat many
// small ones (a CPU pays ~10 us per operation). Padding sits after each
// sequence's end: causally no real query reaches it, so only bidirectional
// attention needs a mask (of keys, [n, L], never L x L); the padded queries'
// rows are dropped, so they get no gradient.
bool PadsUnequal(const std::vector<int64_t>& lengths) {
  const int64_t n = static_cast<int64_t>(lengths.size());
  const int64_t L = *std::max_element(lengths.begin(), lengths.end());
  double work = 0;
  for (int64_t l : lengths) work += static_cast<double>(l) * static_cast<double>(l);
  return static_cast<double>(n * L * L) <= 2 * work;
}

// The padded batch's row of each packed row.
torch::Tensor PaddedSlots(const std::vector<int64_t>& lengths, const torch::Device& device) {
  const int64_t L = *std::max_element(lengths.begin(), lengths.end());
  std::vector<int64_t> slots;
  for (size_t i = 0; i < lengths.size(); ++i) {
    for (int64_t j = 0; j < lengths[i]; ++j) slots.push_back(static_cast<int64_t>(i) * L + j);
  }
  return torch::tensor(slots, torch::kLong).to(device);
}

// [n, L]: which keys of the padded batch are real.
torch::Tensor KeysValid(const std::vector<int64_t>& lengths, const torch::Device& device) {
  const int64_t n = static_cast<int64_t>(lengths.size());
  const int64_t L = *std::max_element(lengths.begin(), lengths.end());
  return (torch::arange(L, torch::kLong).view({1, L}) < torch::tensor(lengths, torch::kLong).view({n, 1})).to(device);
}

// Packed rows [T, ...] into a padded batch [n, L, ...], padding `fill`.
torch::Tensor PadRows(const torch::Tensor& rows, const torch::Tensor& slots, int64_t n, int64_t L, double fill = 0) {
  auto shape = rows.sizes().vec();
  shape[0] = n * L;
  const torch::Tensor out = torch::full(shape, fill, rows.options()).index_copy_(0, slots, rows);
  shape[0] = L;
  shape.insert(shape.begin(), n);
  return out.view(shape);
}

// A padded batch [n, L, ...] back to its packed rows [T, ...].
torch::Tensor UnpadRows(const torch::Tensor& t, const torch::Tensor& slots) {
  auto shape = t.sizes().vec();
  shape.erase(shape.begin());
  shape[0] = t.size(0) * t.size(1);
  return t.reshape(shape).index_select(0, slots);
}

// Unequal sequences on a CPU, through the flash kernel's own forward and
// backward operators: what the backward keeps is the packed q, k, v, the
// output (the same tensor the output projection keeps) and the log-sum-exp
// per query and head, as cost/layer_work.h ActivationBytes prices. Through
// autograd, SDPA would keep its padded copies of all four as well
// (~2x the attention's bytes).
struct PackedFlashCpu : torch::autograd::Function<PackedFlashCpu> {
  // q [1, T, heads, d], k and v [1, T, kv_heads, d] -> [1, T, heads, d].
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, std::vector<int64_t> lengths, bool causal) {
    const int64_t T = q.size(1), heads = q.size(2), d = q.size(3);
    torch::Tensor out, lse;  // [1, T, heads, d], [T, heads] (fp32)
    if (PadsUnequal(lengths)) {
      const int64_t n = static_cast<int64_t>(lengths.size()), L = *std::max_element(lengths.begin(), lengths.end());
      const torch::Tensor slots = PaddedSlots(lengths, q.device());
      auto [o, l] =
          FlashCpuForward(PadRows(q[0], slots, n, L).transpose(1, 2), PadRows(k[0], slots, n, L).transpose(1, 2),
                          PadRows(v[0], slots, n, L).transpose(1, 2), causal, KeyMask(lengths, causal, q));
      out = UnpadRows(o.transpose(1, 2), slots).view({1, T, heads, d});
      lse = UnpadRows(l.transpose(1, 2), slots);
    } else {
      std::vector<torch::Tensor> outs, lses;
      int64_t off = 0;
      for (int64_t len : lengths) {
        auto [o, l] =
            FlashCpuForward(q.slice(1, off, off + len).transpose(1, 2), k.slice(1, off, off + len).transpose(1, 2),
                            v.slice(1, off, off + len).transpose(1, 2), causal, std::nullopt);
        outs.push_back(o.transpose(1, 2));
        lses.push_back(l[0].transpose(0, 1));
        off += len;
      }
      out = torch::cat(outs, 1);
      lse = torch::cat(lses, 0);
    }
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["lengths"] = lengths;
    ctx->saved_data["causal"] = causal;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const std::vector<int64_t> lengths = ctx->saved_data["lengths"].toIntVector();
    const bool causal = ctx->saved_data["causal"].toBool();
    const torch::Tensor dout = grads[0].to(q.scalar_type());
    torch::Tensor dq, dk, dv;
    if (PadsUnequal(lengths)) {
      const int64_t n = static_cast<int64_t>(lengths.size()), L = *std::max_element(lengths.begin(), lengths.end());
      const torch::Tensor slots = PaddedSlots(lengths, q.device());
      // Padded queries get lse +inf: their probabilities are 0, so they add
      // nothing to dK and dV (their dO and O are 0 too).
      const double inf = std::numeric_limits<double>::infinity();
      auto [gq, gk, gv] =
          FlashCpuBackward(PadRows(dout[0], slots, n, L).transpose(1, 2), PadRows(q[0], slots, n, L).transpose(1, 2),
                           PadRows(k[0], slots, n, L).transpose(1, 2), PadRows(v[0], slots, n, L).transpose(1, 2),
                           PadRows(out[0], slots, n, L).transpose(1, 2), PadRows(lse, slots, n, L, inf).transpose(1, 2),
                           causal, KeyMask(lengths, causal, q));
      dq = UnpadRows(gq.transpose(1, 2), slots).view(q.sizes());
      dk = UnpadRows(gk.transpose(1, 2), slots).view(k.sizes());
      dv = UnpadRows(gv.transpose(1, 2), slots).view(v.sizes());
    } else {
      std::vector<torch::Tensor> dqs, dks, dvs;
      int64_t off = 0;
      for (int64_t len : lengths) {
        auto rows = [&](const torch::Tensor& t) { return t.slice(1, off, off + len).transpose(1, 2); };
        auto [gq, gk, gv] = FlashCpuBackward(rows(dout), rows(q), rows(k), rows(v), rows(out),
                                             lse.slice(0, off, off + len).transpose(0, 1).unsqueeze(0).contiguous(),
                                             causal, std::nullopt);
        dqs.push_back(gq.transpose(1, 2));
        dks.push_back(gk.transpose(1, 2));
        dvs.push_back(gv.transpose(1, 2));
        off += len;
      }
      dq = torch::cat(dqs, 1);
      dk = torch::cat(dks, 1);
      dv = torch::cat(dvs, 1);
    }
    return {dq, dk, dv, torch::Tensor(), torch::Tensor()};
  }

  // Bidirectional attention over a padded batch: an additive mask of its
  // padded keys, [n, 1, 1, L] (the kernel takes no boolean mask).
  static std::optional<torch::Tensor> KeyMask(const std::vector<int64_t>& lengths, bool causal,
                                              const torch::Tensor& q) {
    if (causal) return std::nullopt;
    const torch::Tensor valid = KeysValid(lengths, q.device());
    return AdditiveMask(valid, q).view({valid.size(0), 1, 1, valid.size(1)});
  }
};

}  // namespace

torch::Tensor Attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                     const std::vector<int64_t>& lengths, bool causal, AttentionBackward backward) {
  const int64_t heads = q.size(2), kv = k.size(2), d = q.size(3), T = q.size(1);
  const int64_t n = static_cast<int64_t>(lengths.size());
  const bool equal = std::all_of(lengths.begin(), lengths.end(), [&](int64_t l) { return l == lengths[0]; });
  if (equal) {
    const int64_t L = lengths[0];
    return Sdpa(q.reshape({n, L, heads, d}), k.reshape({n, L, kv, d}), v.reshape({n, L, kv, d}), causal, {})
        .reshape({1, T, heads, d});
  }
  if (q.is_cpu() && backward == AttentionBackward::kDevice) return PackedFlashCpu::apply(q, k, v, lengths, causal);
  // Elsewhere through autograd (docs/runtime.md "Attention": the padded
  // batch's q, k, v and output are kept beside the packed output).
  if (PadsUnequal(lengths)) {
    const int64_t L = *std::max_element(lengths.begin(), lengths.end());
    const torch::Tensor slots = PaddedSlots(lengths, q.device());
    // Gathered from the packed rows plus one zero row: index_select keeps
    // only its index for the backward (index_copy would keep the source too).
    std::vector<int64_t> gather(static_cast<size_t>(n * L), T);
    int64_t row = 0;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < lengths[i]; ++j) gather[i * L + j] = row++;
    }
    const torch::Tensor from = torch::tensor(gather, torch::kLong).to(q.device());
    auto pad = [&](const torch::Tensor& t) {
      return torch::cat({t[0], torch::zeros({1, t.size(2), d}, t.options())})
          .index_select(0, from)
          .view({n, L, t.size(2), d});
    };
    const torch::Tensor keys_valid = causal ? torch::Tensor() : KeysValid(lengths, q.device());
    const torch::Tensor out = Sdpa(pad(q), pad(k), pad(v), causal, keys_valid);
    return out.reshape({n * L, heads, d}).index_select(0, slots).view({1, T, heads, d});
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
