#include "loom/runtime/context_parallel.h"

#include <numeric>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "loom/cost/layer_work.h"
#include "loom/error.h"
#include "loom/runtime/autograd_pointers.h"
#include "loom/runtime/bitfield_attention.h"

namespace loom::runtime {

namespace {

// `t` with dimension 0 padded to `rows` with `fill`.
torch::Tensor Pad(const torch::Tensor& t, int64_t rows, double fill) {
  if (t.size(0) == rows) return t;
  std::vector<int64_t> shape = t.sizes().vec();
  shape[0] = rows - t.size(0);
  return torch::cat({t, torch::full(shape, fill, t.options())}, 0);
}

// [heads, rows, d] padded with zero rows to `rows`.
torch::Tensor PadRows(const torch::Tensor& t, int64_t rows) { return Pad(t.transpose(0, 1), rows, 0).transpose(0, 1); }

// Which keys (owner rank's rows [k0, k1)) each of this rank's queries may
// see: the same sequence and, causal, not a later position. [rows_q, k1 - k0].
torch::Tensor Visible(const AttentionLayout& L, int q_rank, int k_rank, bool causal, int64_t k0, int64_t k1) {
  const int64_t n = L.rows[q_rank];
  const torch::Tensor qs = L.seq[q_rank].slice(0, 0, n).view({n, 1}), qp = L.pos[q_rank].slice(0, 0, n).view({n, 1});
  const torch::Tensor ks = L.seq[k_rank].slice(0, k0, k1).view({1, -1});
  const torch::Tensor kp = L.pos[k_rank].slice(0, k0, k1).view({1, -1});
  torch::Tensor ok = (qs == ks) & (ks >= 0);
  if (causal) ok = ok & (kp <= qp);
  return ok;
}

// A ring step scores kRingKeyTile keys at a time (cost/layer_work.h, where
// the memory model prices its tiles): the online softmax (flash attention's)
// over tiles of the block in hand, so that no step makes a [heads, rows,
// rows] score matrix (a ring step over whole blocks made four of them in its
// backward: tiny-vlm under CP 2 measured 1.5x its predicted peak).

// Grouped-query attention without expanding K/V (what the memory model
// prices, and half the ring's bytes at Llama's 4:1): q's heads as [kv heads,
// group, rows, d] against K/V [kv heads, 1, rows, d], broadcast over the group.
// The output is made row-major, [rows, heads, d], the layout the output
// projection reads: the tensor saved here is the one it keeps (a [heads,
// rows, d] output made a second copy per layer for it, and expanded K/V two
// more halves of q's width: tiny-llm under CP 2 kept 1.15x the prediction).
struct RingAttentionFn : torch::autograd::Function<RingAttentionFn> {
  // q: [heads, rows, d]; k, v: [kv heads, rows, d] of this rank.
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor q, torch::Tensor k, torch::Tensor v,
                               c10::IValue layout_capsule, bool causal, int64_t cp_ptr) {
    auto L = c10::static_intrusive_pointer_cast<AttentionLayout>(layout_capsule.toCapsule());
    ContextParallel* cp = FromInt<ContextParallel>(cp_ptr);
    const int C = cp->size, me = cp->rank;
    const int64_t max_rows = L->seq.size(1), heads = q.size(0), rows = q.size(1), d = q.size(2), kv = k.size(0);
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    const float inf = std::numeric_limits<float>::infinity();
    const auto f = torch::kFloat;
    const torch::Tensor qg = q.to(f).view({kv, heads / kv, rows, d});
    // The block in hand: K and V stacked, padded to the longest rank's rows.
    torch::Tensor block = torch::stack({PadRows(k, max_rows), PadRows(v, max_rows)}).to(f);
    torch::Tensor m = torch::full({kv, heads / kv, rows, 1}, -inf, qg.options());
    torch::Tensor l = torch::zeros_like(m), o = torch::zeros_like(qg), safe;
    for (int s = 0; s < C; ++s) {
      const int owner = (me - s + C) % C;
      for (int64_t k0 = 0; k0 < max_rows;
           k0 += kRingKeyTile) {  // flash attention's online softmax, a key tile at a time
        const int64_t k1 = std::min(max_rows, k0 + kRingKeyTile);
        const torch::Tensor kb = block[0].slice(1, k0, k1).unsqueeze(1), vb = block[1].slice(1, k0, k1).unsqueeze(1);
        // One tile of scores at a time, turned into probabilities in place.
        torch::Tensor p = torch::matmul(qg, kb.transpose(-2, -1));  // [kv, group, rows, tile]
        p.mul_(scale).masked_fill_(~Visible(*L, me, owner, causal, k0, k1), -inf);
        const torch::Tensor m_new = torch::maximum(m, std::get<0>(p.max(-1, true)));
        safe = torch::where(torch::isinf(m_new), torch::zeros_like(m_new), m_new);
        p.sub_(safe).exp_();
        const torch::Tensor alpha = torch::exp(m - safe);
        l = l * alpha + p.sum(-1, true);
        o = o * alpha + torch::matmul(p, vb);
        m = m_new;
      }
      if (s + 1 < C) block = cp->ring(block);
    }
    // [rows, heads, d], in q's dtype: what the output projection reads and keeps.
    const torch::Tensor out = (o / l).view({heads, rows, d}).transpose(0, 1).to(q.scalar_type()).contiguous();
    const torch::Tensor lse = safe + torch::log(l);  // every query sees itself: l > 0
    // Kept in the compute dtype (the fp32 copies are the backward's own again).
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["layout"] = layout_capsule;
    ctx->saved_data["causal"] = causal;
    ctx->saved_data["cp"] = cp_ptr;
    return out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &lse = saved[4];
    auto L = c10::static_intrusive_pointer_cast<AttentionLayout>(ctx->saved_data["layout"].toCapsule());
    const bool causal = ctx->saved_data["causal"].toBool();
    ContextParallel* cp = FromInt<ContextParallel>(ctx->saved_data["cp"].toInt());
    const int C = cp->size, me = cp->rank;
    const int64_t max_rows = L->seq.size(1), heads = q.size(0), rows = q.size(1), d = q.size(2), kv = k.size(0);
    const int64_t group = heads / kv;
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    const auto f = torch::kFloat;
    const torch::Tensor qg = q.to(f).view({kv, group, rows, d});
    // [rows, heads, d] -> [kv, group, rows, d], in fp32
    auto grouped = [&](const torch::Tensor& t) { return t.transpose(0, 1).to(f).reshape({kv, group, rows, d}); };
    const torch::Tensor dout = grouped(grads[0]);
    const torch::Tensor delta = (dout * grouped(saved[3])).sum(-1, true);  // [kv, group, rows, 1]
    // K, V, dK, dV of the block in hand, travelling together.
    const torch::Tensor kp = PadRows(k, max_rows).to(f), vp = PadRows(v, max_rows).to(f);
    torch::Tensor block = torch::stack({kp, vp, torch::zeros_like(kp), torch::zeros_like(vp)});
    torch::Tensor dq = torch::zeros_like(qg);
    for (int s = 0; s < C; ++s) {
      const int owner = (me - s + C) % C;
      for (int64_t k0 = 0; k0 < max_rows; k0 += kRingKeyTile) {
        const int64_t k1 = std::min(max_rows, k0 + kRingKeyTile);
        const torch::Tensor kb = block[0].slice(1, k0, k1).unsqueeze(1), vb = block[1].slice(1, k0, k1).unsqueeze(1);
        // Two tiles live at once (kRingTileCopies): the probabilities and,
        // in place of dP, the scores' gradient.
        torch::Tensor p = torch::matmul(qg, kb.transpose(-2, -1));  // [kv, group, rows, tile]
        p.mul_(scale).sub_(lse).exp_().masked_fill_(~Visible(*L, me, owner, causal, k0, k1), 0);
        torch::Tensor ds = torch::matmul(dout, vb.transpose(-2, -1));  // dP
        ds.sub_(delta).mul_(p);
        dq += torch::matmul(ds, kb) * scale;
        // Each K/V head's gradient sums over the query heads of its group
        // (the block is this step's own: the ring hands on a fresh one).
        block[2].slice(1, k0, k1) += (torch::matmul(ds.transpose(-2, -1), qg) * scale).sum(1);
        block[3].slice(1, k0, k1) += torch::matmul(p.transpose(-2, -1), dout).sum(1);
      }
      block = cp->ring(block);  // C hops: each block's gradients end at its owner
    }
    return {dq.view({heads, rows, d}).to(q.scalar_type()),
            block[2].slice(1, 0, rows).to(k.scalar_type()),
            block[3].slice(1, 0, rows).to(v.scalar_type()),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor()};
  }
};

struct GatherContextFn : torch::autograd::Function<GatherContextFn> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x, c10::IValue layout_capsule,
                               int64_t cp_ptr) {
    auto L = c10::static_intrusive_pointer_cast<AttentionLayout>(layout_capsule.toCapsule());
    ContextParallel* cp = FromInt<ContextParallel>(cp_ptr);
    const int64_t max_rows = L->seq.size(1);
    const std::vector<torch::Tensor> all = cp->all_gather(Pad(x[0], max_rows, 0).contiguous());
    torch::Tensor whole = torch::zeros({L->tokens, x.size(2)}, x.options());
    for (int c = 0; c < cp->size; ++c) {
      whole.index_copy_(0, L->index[c].slice(0, 0, L->rows[c]), all[c].slice(0, 0, L->rows[c]));
    }
    ctx->saved_data["layout"] = layout_capsule;
    ctx->saved_data["cp"] = cp_ptr;
    return whole.unsqueeze(0);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto L = c10::static_intrusive_pointer_cast<AttentionLayout>(ctx->saved_data["layout"].toCapsule());
    ContextParallel* cp = FromInt<ContextParallel>(ctx->saved_data["cp"].toInt());
    torch::Tensor sum = grads[0].contiguous().clone();
    cp->all_reduce(sum);
    return {sum.index_select(1, L->mine), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

std::vector<int64_t> ContextRows(const MicrobatchPacking& packing, int module, int rank, int size, CpSplit split) {
  if (split == CpSplit::kBalanced) {
    std::vector<std::pair<int64_t, int64_t>> blocks;  // [begin, end) rows
    std::vector<int64_t> work;
    int64_t start = 0;
    for (const auto& s : packing.modules[module]) {
      for (int64_t b = 0; b * kCpBlockTokens < s.tokens; ++b) {
        blocks.push_back({start + b * kCpBlockTokens, start + std::min(s.tokens, (b + 1) * kCpBlockTokens)});
        work.push_back(b + 1);
      }
      start += s.tokens;
    }
    const std::vector<int> rank_of = BalancedAssignment(work, size).rank_of_block;
    std::vector<int64_t> out;
    for (size_t i = 0; i < blocks.size(); ++i) {
      if (rank_of[i] != rank) continue;
      for (int64_t r = blocks[i].first; r < blocks[i].second; ++r) out.push_back(r);
    }
    return out;
  }
  std::vector<int64_t> out;
  int64_t start = 0;
  for (const auto& s : packing.modules[module]) {
    const int64_t L = s.tokens, chunks = 2 * static_cast<int64_t>(size);
    auto bound = [&](int64_t i) { return i * L / chunks; };
    for (int64_t chunk : {static_cast<int64_t>(rank), chunks - 1 - rank}) {
      for (int64_t p = bound(chunk); p < bound(chunk + 1); ++p) out.push_back(start + p);
    }
    start += L;
  }
  return out;
}

c10::intrusive_ptr<AttentionLayout> MakeAttentionLayout(const MicrobatchPacking& packing, int module,
                                                        const ContextParallel& cp, const torch::Device& device,
                                                        const Module* spec) {
  auto L = c10::make_intrusive<AttentionLayout>();
  L->lengths = packing.Lengths(module);
  L->tokens = std::accumulate(L->lengths.begin(), L->lengths.end(), int64_t{0});
  if (spec != nullptr && spec->bitfield_attention) {
    std::vector<MaskSegment> segments;
    const auto& sequences = packing.modules[module];
    for (size_t i = 0; i < sequences.size(); ++i) {
      for (const Part& part : sequences[i].parts) {
        int modality = -1;
        if (part.source >= 0) {
          const auto at = std::find(spec->inputs.begin(), spec->inputs.end(), part.source);
          modality = static_cast<int>(at - spec->inputs.begin());
        }
        segments.push_back({part.tokens, modality, static_cast<int>(i)});
      }
    }
    L->mask = BuildMask(segments, MaskLayout::kEmbedded);  // in packing order
  }
  if (cp.size < 2) return L;
  L->all_gather = !L->mask.empty() || cp.split == CpSplit::kBalanced;
  std::vector<int64_t> seq_of, pos_of;  // per row of the whole tensor
  for (size_t i = 0; i < L->lengths.size(); ++i) {
    for (int64_t p = 0; p < L->lengths[i]; ++p) {
      seq_of.push_back(static_cast<int64_t>(i));
      pos_of.push_back(p);
    }
  }
  std::vector<std::vector<int64_t>> rows(cp.size);
  int64_t max_rows = 0;
  for (int c = 0; c < cp.size; ++c) {
    rows[c] = ContextRows(packing, module, c, cp.size, cp.split);
    L->rows.push_back(static_cast<int64_t>(rows[c].size()));
    max_rows = std::max(max_rows, L->rows.back());
  }
  std::vector<int64_t> seq(cp.size * max_rows, -1), pos(cp.size * max_rows, -1), index(cp.size * max_rows, -1);
  for (int c = 0; c < cp.size; ++c) {
    for (size_t j = 0; j < rows[c].size(); ++j) {
      seq[c * max_rows + j] = seq_of[rows[c][j]];
      pos[c * max_rows + j] = pos_of[rows[c][j]];
      index[c * max_rows + j] = rows[c][j];
    }
  }
  const auto opts = torch::TensorOptions(torch::kLong);
  L->seq = torch::tensor(seq, opts).view({cp.size, max_rows}).to(device);
  L->pos = torch::tensor(pos, opts).view({cp.size, max_rows}).to(device);
  L->index = torch::tensor(index, opts).view({cp.size, max_rows}).to(device);
  L->mine = torch::tensor(rows[cp.rank], opts).to(device);
  L->mine_rows = rows[cp.rank];
  return L;
}

const std::vector<std::vector<int64_t>>& AttentionLayout::KvBlocksOf(const BitfieldMask& m, int64_t block_tokens) {
  for (const auto& c : kv_blocks) {
    if (c.mask == &m && c.block_tokens == block_tokens) return c.blocks;
  }
  kv_blocks.push_back({&m, block_tokens, KvBlocks(m, block_tokens)});
  return kv_blocks.back().blocks;
}

BitfieldMask DocumentMask(const std::vector<int64_t>& lengths, bool causal) {
  return BuildMask(DocumentSegments(lengths, causal), MaskLayout::kPacked);
}

torch::Tensor AllGatherAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 const c10::intrusive_ptr<AttentionLayout>& layout, bool causal, int64_t block_tokens,
                                 ContextParallel* cp) {
  const BitfieldMask* mask = &layout->mask;
  if (mask->empty()) {
    BitfieldMask& cached = causal ? layout->causal_mask : layout->full_mask;
    if (cached.empty()) cached = DocumentMask(layout->lengths, causal);
    mask = &cached;
  }
  // [1, rows, heads, d] -> [1, rows, heads * d], gathered whole, and back.
  auto whole = [&](const torch::Tensor& t) {
    const int64_t heads = t.size(2), d = t.size(3);
    return GatherContext(t.reshape({1, t.size(1), heads * d}), layout, cp).view({1, layout->tokens, heads, d});
  };
  return BitfieldAttentionRows(q, whole(k), whole(v), *mask, layout->mine_rows, block_tokens,
                               &layout->KvBlocksOf(*mask, block_tokens));
}

torch::Tensor RingAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                            const c10::intrusive_ptr<AttentionLayout>& layout, bool causal, ContextParallel* cp) {
  // [1, rows, heads, d] -> [heads, rows, d]; the output comes back [rows, heads, d].
  const torch::Tensor out =
      RingAttentionFn::apply(q[0].transpose(0, 1).contiguous(), k[0].transpose(0, 1).contiguous(),
                             v[0].transpose(0, 1).contiguous(), c10::IValue::make_capsule(layout), causal, AsInt(cp));
  return out.unsqueeze(0);
}

torch::Tensor GatherContext(const torch::Tensor& x, const c10::intrusive_ptr<AttentionLayout>& layout,
                            ContextParallel* cp) {
  return GatherContextFn::apply(x, c10::IValue::make_capsule(layout), AsInt(cp));
}

const RopeTables& AttentionLayout::RopeTablesOf(const torch::Tensor& inverse_frequencies, const torch::Device& device,
                                                torch::ScalarType dtype) {
  for (const CachedRope& c : rope) {
    if (c.dtype == dtype && c.tables.cos.device() == device &&
        c.inverse_frequencies.sizes() == inverse_frequencies.sizes() &&
        torch::equal(c.inverse_frequencies, inverse_frequencies)) {
      return c.tables;
    }
  }
  rope.push_back({inverse_frequencies, dtype, MakeRopeTables(inverse_frequencies, RowPositions(device), dtype)});
  return rope.back().tables;
}

const torch::Tensor& AttentionLayout::RowPositions(const torch::Device& device) {
  if (!row_positions.defined() || row_positions.device() != device) {
    std::vector<int64_t> positions;
    for (int64_t length : lengths) {
      for (int64_t p = 0; p < length; ++p) positions.push_back(p);
    }
    if (!mine_rows.empty()) {
      std::vector<int64_t> mine;
      mine.reserve(mine_rows.size());
      for (int64_t row : mine_rows) mine.push_back(positions[static_cast<size_t>(row)]);
      positions = std::move(mine);
    }
    row_positions = torch::tensor(positions, torch::kLong).to(device);
  }
  return row_positions;
}

}  // namespace loom::runtime
