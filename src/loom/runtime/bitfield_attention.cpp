#include "loom/runtime/bitfield_attention.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <set>

#include "loom/error.h"

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

// The blocked path's window: what Masked computes, through the fused SDPA
// under the window's boolean mask, so the backward keeps the block's output
// and log-sum-exp rather than its scores (runtime/attention.h).
torch::Tensor MaskedFused(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                          const torch::Tensor& allowed) {
  return at::scaled_dot_product_attention(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0),
                                          allowed.view({1, 1, allowed.size(0), allowed.size(1)}))
      .squeeze(0);
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
                                const std::vector<std::vector<int64_t>>* kv_blocks) {
  CheckShapes(q, mask);
  std::vector<int64_t> all(q.size(1));
  for (int64_t i = 0; i < q.size(1); ++i) all[i] = i;
  return BitfieldAttentionRows(q, k, v, mask, all, block_tokens, kv_blocks);
}

torch::Tensor BitfieldAttentionRows(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    const BitfieldMask& mask, const std::vector<int64_t>& rows, int64_t block_tokens,
                                    const std::vector<std::vector<int64_t>>* kv_blocks_given) {
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
  const DeviceMask on_device = ToDevice(mask, q.device());
  const auto index = torch::TensorOptions(torch::kLong);
  auto heads_first = [](const torch::Tensor& t) { return t[0].transpose(0, 1); };
  const torch::Tensor Q = heads_first(q), K = heads_first(k), V = heads_first(v);
  std::vector<torch::Tensor> out;
  for (int64_t c0 = 0; c0 < n; c0 += block_tokens) {
    const int64_t c1 = std::min(n, c0 + block_tokens);
    const std::vector<int64_t> qs(rows.begin() + c0, rows.begin() + c1);
    std::set<int64_t> visit;  // the KV blocks any of these queries' blocks reads
    for (int64_t r : qs) visit.insert(kv_blocks[r / block_tokens].begin(), kv_blocks[r / block_tokens].end());
    std::vector<int64_t> ks;
    std::vector<torch::Tensor> kparts, vparts;
    for (int64_t kb : visit) {
      const int64_t k0 = kb * block_tokens, k1 = std::min(T, k0 + block_tokens);
      for (int64_t j = k0; j < k1; ++j) ks.push_back(j);
      kparts.push_back(K.slice(1, k0, k1));
      vparts.push_back(V.slice(1, k0, k1));
    }
    const torch::Tensor allowed =
        AllowedOnDevice(on_device, torch::tensor(qs, index).to(q.device()), torch::tensor(ks, index).to(q.device()));
    out.push_back(MaskedFused(Q.slice(1, c0, c1), torch::cat(kparts, 1), torch::cat(vparts, 1), allowed));
  }
  // No queries (a CP rank without rows of this microbatch): an empty output
  // that still depends on k and v, so their backward (an all-reduce under CP)
  // runs on this rank as on the others.
  if (out.empty()) return q + (k.sum() + v.sum()) * 0;
  return torch::cat(out, 1).transpose(0, 1).unsqueeze(0);
}

}  // namespace loom::runtime
