#include "loom/runtime/bitfield_attention.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <set>

#include "loom/error.h"
#include "loom/runtime/attention.h"

namespace loom::runtime {

namespace {

void CheckShapes(const torch::Tensor& q, const BitfieldMask& mask) {
  if (q.dim() != 4 || q.size(0) != 1 || q.size(1) != static_cast<int64_t>(mask.size())) {
    throw Error(
        fmt::format("bitfield attention: q of {} dimensions and {} tokens for a mask of {} tokens; valid: "
                    "[1, T, heads, d] with T the mask's length",
                    q.dim(), q.dim() >= 2 ? q.size(1) : 0, mask.size()));
  }
}

// Softmax attention of queries [heads, nq, d] over keys and values [heads, nk, d]
// where `allowed` [nq, nk] is true.
torch::Tensor Masked(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                     const torch::Tensor& allowed) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  auto scores = torch::matmul(q, k.transpose(-2, -1)) * scale;
  scores = scores.masked_fill(allowed.logical_not().unsqueeze(0), -std::numeric_limits<float>::infinity());
  return torch::matmul(torch::softmax(scores, -1), v);
}

// allowed[i][j] for queries `qs` and keys `ks` (positions), by MayAttend on
// the host: the reference's, independent of the device rule below.
torch::Tensor Allowed(const BitfieldMask& mask, const std::vector<int64_t>& qs, const std::vector<int64_t>& ks,
                      const torch::Device& device) {
  torch::Tensor a = torch::zeros({static_cast<int64_t>(qs.size()), static_cast<int64_t>(ks.size())}, torch::kBool);
  auto acc = a.accessor<bool, 2>();
  for (size_t i = 0; i < qs.size(); ++i) {
    for (size_t j = 0; j < ks.size(); ++j) acc[i][j] = MayAttend(mask, qs[i], ks[j]);
  }
  return a.to(device);
}

// The mask's fields and documents as tensors on the attention's device, so
// the blocked path evaluates the rule there (on a GPU, beside its matmuls).
struct DeviceMask {
  torch::Tensor bits, doc;  // [T] int64; bit 63 (causal) is the sign bit
};

DeviceMask ToDevice(const BitfieldMask& mask, const torch::Device& device) {
  std::vector<int64_t> bits(mask.size()), doc(mask.size());
  for (size_t i = 0; i < mask.size(); ++i) {
    bits[i] = static_cast<int64_t>(mask[i].bits);
    doc[i] = mask[i].doc;
  }
  const auto opts = torch::TensorOptions(torch::kLong);
  return {torch::tensor(bits, opts).to(device), torch::tensor(doc, opts).to(device)};
}

// MayAttend for every (query qi[i], key ki[j]) at once (data/attention_mask.h's rule).
torch::Tensor AllowedOnDevice(const DeviceMask& m, const torch::Tensor& qi, const torch::Tensor& ki) {
  const torch::Tensor qb = m.bits.index_select(0, qi).view({-1, 1}), kb = m.bits.index_select(0, ki).view({1, -1});
  const torch::Tensor same_doc = m.doc.index_select(0, qi).view({-1, 1}) == m.doc.index_select(0, ki).view({1, -1});
  constexpr int64_t kModalities = std::numeric_limits<int64_t>::max();  // bits 0..62
  const torch::Tensor text = torch::bitwise_and(qb, 1).ne(0);
  const torch::Tensor shared = torch::bitwise_and(torch::bitwise_and(qb, kb), kModalities).ne(0);
  const torch::Tensor causal = qb.lt(0);  // bit 63
  const torch::Tensor earlier = ki.view({1, -1}) <= qi.view({-1, 1});
  const torch::Tensor text_ok = shared & (causal.logical_not() | earlier);
  return same_doc & torch::where(text, text_ok, qb == kb);
}

// The blocked path's windows: per block of `block_tokens` query rows, the KV
// blocks its queries may read. Host data, kept by the autograd node.
struct Windows : torch::CustomClassHolder {
  BitfieldMask mask;
  std::vector<int64_t> rows;
  int64_t block_tokens = 0;
  std::vector<std::vector<int64_t>> kv_blocks;  // per query block
  bool flash_cpu = false;                       // the CPU flash kernel's operators, else autograd

  int64_t blocks() const { return static_cast<int64_t>(kv_blocks.size()); }
  std::pair<int64_t, int64_t> QueryRange(int64_t b) const {
    return {b * block_tokens, std::min<int64_t>(static_cast<int64_t>(rows.size()), (b + 1) * block_tokens)};
  }
  // Key positions of query block b's window.
  std::vector<int64_t> Keys(int64_t b) const {
    const int64_t T = static_cast<int64_t>(mask.size());
    std::vector<int64_t> ks;
    for (int64_t kb : kv_blocks[b]) {
      for (int64_t j = kb * block_tokens; j < std::min(T, (kb + 1) * block_tokens); ++j) ks.push_back(j);
    }
    return ks;
  }
};

// One query block's window: its queries [heads, nq, d], keys and values
// [kv_heads, nk, d] gathered from the window's blocks, and where the mask
// allows each (query, key) pair [nq, nk], evaluated on the tensors' device.
struct Window {
  torch::Tensor q, k, v, allowed, keys;
};

Window Gather(const Windows& w, const DeviceMask& m, int64_t b, const torch::Tensor& Q, const torch::Tensor& K,
              const torch::Tensor& V) {
  const auto [c0, c1] = w.QueryRange(b);
  const auto index = torch::TensorOptions(torch::kLong);
  const torch::Tensor qs =
      torch::tensor(std::vector<int64_t>(w.rows.begin() + c0, w.rows.begin() + c1), index).to(Q.device());
  const torch::Tensor ks = torch::tensor(w.Keys(b), index).to(Q.device());
  return {Q.slice(1, c0, c1), K.index_select(1, ks), V.index_select(1, ks), AllowedOnDevice(m, qs, ks), ks};
}

// Attention over each query block's window without autograd recording it: the
// backward keeps q, k, v, the output (the tensor the output projection keeps
// too) and, on a CPU, the log-sum-exp per query and head, as
// cost/layer_work.h ActivationBytes prices. Through autograd each block's SDPA
// would keep its gathered K/V window (~T/2 rows a block under a causal mask)
// and its boolean mask besides. On a CPU both passes call the flash kernel
// (attention.h FlashCpuForward / FlashCpuBackward); elsewhere the backward
// recomputes each block's forward under autograd (one more attention
// forward), as no device-independent SDPA backward operator exists.
struct BlockedAttention : torch::autograd::Function<BlockedAttention> {
  // q [1, n, heads, d], k and v [1, T, kv_heads, d].
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, c10::IValue windows_capsule) {
    auto w = c10::static_intrusive_pointer_cast<Windows>(windows_capsule.toCapsule());
    const DeviceMask m = ToDevice(w->mask, q.device());
    const torch::Tensor Q = HeadsFirst(q), K = HeadsFirst(k), V = HeadsFirst(v);
    std::vector<torch::Tensor> outs, lses;
    for (int64_t b = 0; b < w->blocks(); ++b) {
      const Window x = Gather(*w, m, b, Q, K, V);
      if (w->flash_cpu) {
        auto [o, l] = FlashCpuForward(x.q.unsqueeze(0), x.k.unsqueeze(0), x.v.unsqueeze(0), false,
                                      AdditiveMask(x.allowed, q).view({1, 1, x.q.size(1), x.k.size(1)}));
        outs.push_back(o[0]);
        lses.push_back(l[0]);
      } else {
        outs.push_back(Sdpa(x));
      }
    }
    const torch::Tensor out = torch::cat(outs, 1).transpose(0, 1).unsqueeze(0).contiguous();
    const torch::Tensor lse = w->flash_cpu ? torch::cat(lses, 1) : torch::Tensor();  // [heads, n]
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["windows"] = windows_capsule;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    auto w = c10::static_intrusive_pointer_cast<Windows>(ctx->saved_data["windows"].toCapsule());
    const DeviceMask m = ToDevice(w->mask, q.device());
    const torch::Tensor Q = HeadsFirst(q), K = HeadsFirst(k), V = HeadsFirst(v), O = HeadsFirst(out);
    const torch::Tensor dO = HeadsFirst(grads[0].to(q.scalar_type()));
    // K/V rows sit in several windows: their gradients accumulate in fp32 (or
    // wider).
    const auto acc = torch::promote_types(K.scalar_type(), torch::kFloat);
    torch::Tensor dQ = torch::empty_like(Q), dK = torch::zeros(K.sizes(), K.options().dtype(acc)),
                  dV = torch::zeros_like(dK);
    for (int64_t b = 0; b < w->blocks(); ++b) {
      const auto [c0, c1] = w->QueryRange(b);
      const Window x = Gather(*w, m, b, Q, K, V);
      torch::Tensor gq, gk, gv;
      if (w->flash_cpu) {
        std::tie(gq, gk, gv) =
            FlashCpuBackward(dO.slice(1, c0, c1).unsqueeze(0), x.q.unsqueeze(0), x.k.unsqueeze(0), x.v.unsqueeze(0),
                             O.slice(1, c0, c1).unsqueeze(0), lse.slice(1, c0, c1).unsqueeze(0).contiguous(), false,
                             AdditiveMask(x.allowed, q).view({1, 1, x.q.size(1), x.k.size(1)}));
        gq = gq[0], gk = gk[0], gv = gv[0];
      } else {
        torch::AutoGradMode enable(true);
        const torch::Tensor qb = x.q.detach().requires_grad_(), kb = x.k.detach().requires_grad_(),
                            vb = x.v.detach().requires_grad_();
        const auto g =
            torch::autograd::grad({Sdpa({qb, kb, vb, x.allowed, x.keys})}, {qb, kb, vb}, {dO.slice(1, c0, c1)});
        gq = g[0], gk = g[1], gv = g[2];
      }
      dQ.slice(1, c0, c1).copy_(gq);
      dK.index_add_(1, x.keys, gk.to(acc));
      dV.index_add_(1, x.keys, gv.to(acc));
    }
    auto back = [&](const torch::Tensor& t) { return t.to(q.scalar_type()).transpose(0, 1).unsqueeze(0); };
    return {back(dQ), back(dK), back(dV), torch::Tensor()};
  }

  // [1, n, heads, d] -> [heads, n, d]
  static torch::Tensor HeadsFirst(const torch::Tensor& t) { return t[0].transpose(0, 1); }

  // SDPA under the window's boolean mask (grouped-query heads as they are).
  static torch::Tensor Sdpa(const Window& x) {
    return at::scaled_dot_product_attention(x.q.unsqueeze(0), x.k.unsqueeze(0), x.v.unsqueeze(0),
                                            x.allowed.view({1, 1, x.allowed.size(0), x.allowed.size(1)}), 0.0, false,
                                            std::nullopt, /*enable_gqa=*/x.k.size(0) != x.q.size(0))
        .squeeze(0);
  }
};

}  // namespace

torch::Tensor BitfieldAttentionReference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                         const BitfieldMask& mask) {
  CheckShapes(q, mask);
  const int64_t T = q.size(1);
  std::vector<int64_t> all(T);
  for (int64_t i = 0; i < T; ++i) all[i] = i;
  // [1, T, heads, d] -> [heads, T, d]
  auto heads_first = [](const torch::Tensor& t) { return t[0].transpose(0, 1); };
  return Masked(heads_first(q), heads_first(k), heads_first(v), Allowed(mask, all, all, q.device()))
      .transpose(0, 1)
      .unsqueeze(0);
}

torch::Tensor BitfieldAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const BitfieldMask& mask, int64_t block_tokens,
                                const std::vector<std::vector<int64_t>>* kv_blocks, AttentionBackward backward) {
  CheckShapes(q, mask);
  std::vector<int64_t> all(q.size(1));
  for (int64_t i = 0; i < q.size(1); ++i) all[i] = i;
  return BitfieldAttentionRows(q, k, v, mask, all, block_tokens, kv_blocks, backward);
}

torch::Tensor BitfieldAttentionRows(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    const BitfieldMask& mask, const std::vector<int64_t>& rows, int64_t block_tokens,
                                    const std::vector<std::vector<int64_t>>* kv_blocks_given,
                                    AttentionBackward backward) {
  CheckShapes(k, mask);
  const int64_t T = k.size(1), n = static_cast<int64_t>(rows.size());
  if (q.dim() != 4 || q.size(1) != n) {
    throw Error(fmt::format("bitfield attention: {} query rows for {} positions; valid: q of [1, rows, heads, d]",
                            q.dim() >= 2 ? q.size(1) : 0, n));
  }
  for (int64_t i = 0; i < n; ++i) {
    if (rows[i] < 0 || rows[i] >= T || (i > 0 && rows[i] <= rows[i - 1])) {
      throw Error(
          fmt::format("bitfield attention: query row {} is {}; valid: ascending positions in [0, {})", i, rows[i], T));
    }
  }
  if (block_tokens < 1) throw Error(fmt::format("bitfield attention: blocks of {} tokens; valid: >= 1", block_tokens));
  std::vector<std::vector<int64_t>> computed;
  if (kv_blocks_given == nullptr) computed = KvBlocks(mask, block_tokens);
  const auto& kv_blocks = kv_blocks_given != nullptr ? *kv_blocks_given : computed;
  if (static_cast<int64_t>(kv_blocks.size()) != (T + block_tokens - 1) / block_tokens) {
    throw Error(fmt::format("bitfield attention: {} KV-block rows for {} tokens in blocks of {}", kv_blocks.size(), T,
                            block_tokens));
  }
  auto windows = c10::make_intrusive<Windows>();
  windows->mask = mask;
  windows->rows = rows;
  windows->block_tokens = block_tokens;
  windows->flash_cpu = q.is_cpu() && backward == AttentionBackward::kDevice;
  for (int64_t c0 = 0; c0 < n; c0 += block_tokens) {
    std::set<int64_t> visit;  // the KV blocks any of these queries' blocks reads
    for (int64_t i = c0; i < std::min(n, c0 + block_tokens); ++i) {
      const auto& blocks = kv_blocks[rows[i] / block_tokens];
      visit.insert(blocks.begin(), blocks.end());
    }
    windows->kv_blocks.emplace_back(visit.begin(), visit.end());
  }
  if (n == 0) {
    // No queries (a CP rank without rows of this microbatch): an empty output
    // that still depends on k and v, so their backward (an all-reduce under CP)
    // runs on this rank as on the others.
    return q + (k.sum() + v.sum()) * 0;
  }
  return BlockedAttention::apply(q, k, v, c10::IValue::make_capsule(windows));
}

}  // namespace loom::runtime
