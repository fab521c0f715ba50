#include "loom/cost/layer_work.h"

#include <fmt/format.h>

#include <algorithm>

#include "loom/error.h"

namespace loom {

namespace {

// One matmul (m x k) * (k x n) with the weight split tp ways: forward,
// backward-data (dX = dY W^T) and backward-weight (dW = X^T dY) each cost 2mkn.
void AddGemm(LayerWork& w, double m, double k, double n, int tp, double e) {
  double flops = 2 * m * k * n / tp;
  double bytes = e * (m * k + (k * n + m * n) / tp);
  for (Phase p : {Phase::kForward, Phase::kBackwardData, Phase::kBackwardWeight}) {
    w.at(p, OpClass::kGemm).flops += flops;
    w.at(p, OpClass::kGemm).bytes += bytes;
  }
}

// Attention core (QK^T, softmax, AV) as FlashAttention runs it: forward 4*d
// per (query, key) pair it computes per head (2 matmuls; a causal mask
// computes half the pairs, a bitfield mask those it allows, its kernel
// skipping the rest); backward recomputes QK^T and adds dV, dP, dQ, dK: 5
// matmuls, 2.5x the forward, all backward-data.
void AddAttentionCore(LayerWork& w, double pairs, double hidden, double io_tokens, double kv_width, int tp, double e) {
  double fwd = 4.0 * pairs * hidden / tp;
  double io = e * io_tokens * (2 * hidden + 2 * kv_width) / tp;
  w.at(Phase::kForward, OpClass::kAttention).flops += fwd;
  w.at(Phase::kForward, OpClass::kAttention).bytes += io;
  w.at(Phase::kBackwardData, OpClass::kAttention).flops += 2.5 * fwd;
  w.at(Phase::kBackwardData, OpClass::kAttention).bytes += 2 * io;
}

// Memory-bound elementwise traffic (norms, residual adds, activations): the
// backward-data pass reads and writes about twice what the forward does.
void AddElementwise(LayerWork& w, double bytes) {
  w.at(Phase::kForward, OpClass::kElementwise).bytes += bytes;
  w.at(Phase::kBackwardData, OpClass::kElementwise).bytes += 2 * bytes;
}

// Convolution as an implicit GEMM over `positions` output positions.
void AddConv(LayerWork& w, double positions, double k_in, double c_out, int tp, double e) {
  double flops = 2 * positions * k_in * c_out / tp;
  double bytes = e * (positions * k_in + (k_in * c_out + positions * c_out) / tp);
  for (Phase p : {Phase::kForward, Phase::kBackwardData, Phase::kBackwardWeight}) {
    w.at(p, OpClass::kConv).flops += flops;
    w.at(p, OpClass::kConv).bytes += bytes;
  }
}

// Widths of Q (and the attention output) and of K or V: heads x head_dim,
// which is the hidden width unless the layer sets head_dim (Qwen3).
double QWidth(const Layer& l) { return static_cast<double>(l.heads * l.HeadDim()); }
double KvWidth(const Layer& l) { return static_cast<double>(l.kv_heads * l.HeadDim()); }
double MlpMatrices(const Layer& l) { return l.gated_mlp ? 3.0 : 2.0; }

// Self-attention block (QKV, core, output projection) of a transformer or conformer.
void AddSelfAttention(LayerWork& w, const Layer& l, const TokenStats& t, int tp, double e) {
  double h = static_cast<double>(l.hidden), q = QWidth(l);
  AddGemm(w, t.tokens, h, q + 2 * KvWidth(l), tp, e);
  AddAttentionCore(w, t.AttentionPairs(l.causal), q, t.tokens, KvWidth(l), tp, e);
  AddGemm(w, t.tokens, q, h, tp, e);
  w.tp_allreduce_bytes += e * t.tokens * h;
}

void AddCrossAttention(LayerWork& w, double tokens, double context_tokens, double cross, double h, double context_dim,
                       int tp, double e) {
  AddGemm(w, tokens, h, h, tp, e);                        // Q from the layer's tokens
  AddGemm(w, context_tokens, context_dim, 2 * h, tp, e);  // K, V from the context
  AddAttentionCore(w, cross, h, tokens, h * context_tokens / std::max(tokens, 1.0), tp, e);
  AddGemm(w, tokens, h, h, tp, e);  // output projection
  w.tp_allreduce_bytes += e * tokens * h;
}

}  // namespace

double LayerWork::Flops(Phase p) const {
  double f = 0;
  for (const auto& op : work[static_cast<int>(p)]) {
    f += op.flops;
  }
  return f;
}

double LayerWork::Bytes(Phase p) const {
  double b = 0;
  for (const auto& op : work[static_cast<int>(p)]) {
    b += op.bytes;
  }
  return b;
}

LayerWork& LayerWork::operator+=(const LayerWork& o) {
  for (int p = 0; p < kNumPhases; ++p) {
    for (int c = 0; c < kNumOpClasses; ++c) {
      work[p][c].flops += o.work[p][c].flops;
      work[p][c].bytes += o.work[p][c].bytes;
    }
  }
  tp_allreduce_bytes += o.tp_allreduce_bytes;
  return *this;
}

namespace {

// A layer's parameters in N: double first, to find a count int64 cannot hold
// (widths of 2^24 multiply past it: a conv's in_channels x kernel^3 x
// out_channels), then int64 once it fits.
template <class N>
N ParamsAs(const Layer& l) {
  const N h = static_cast<N>(l.hidden);
  const N q = static_cast<N>(l.heads * l.HeadDim()), kv = static_cast<N>(l.kv_heads * l.HeadDim());
  switch (l.kind) {
    case LayerKind::kTransformer: {
      N attn = l.self_attention ? h * (q + 2 * kv) + q * h : 0;
      N mlp = (l.gated_mlp ? 3 : 2) * h * l.ffn_hidden;
      // Cross-attention: Q and the output on the layer's width, K and V from
      // the context's (grouped by kv_heads: Mllama's 8 of 32).
      N cross = l.cross_attention ? 2 * h * q + 2 * l.context_dim * kv : 0;
      N norms = (l.cross_attention && l.self_attention ? 3 : 2) * h;
      // Biases and q/k norms (spec/layer.h): Qwen2's q/k/v, CLIP's and SigLIP's everywhere, Qwen3's per-head norms.
      N extra = (l.qkv_bias ? q + 2 * kv : 0) + (l.out_bias ? h : 0) +
                (l.mlp_bias ? (l.gated_mlp ? 2 : 1) * l.ffn_hidden + h : 0) + (l.qk_norm ? 2 * l.HeadDim() : 0);
      return attn + mlp + cross + norms + extra;
    }
    case LayerKind::kConformer: {
      N attn = h * (h + 2 * kv) + h * h;
      N ffns = 2 * (2 * h * l.ffn_hidden);             // macaron: two half-step FFNs
      N conv = h * 2 * h + l.conv_kernel * h + h * h;  // pointwise (GLU), depthwise, pointwise
      return attn + ffns + conv + 5 * h;
    }
    case LayerKind::kPatchEmbed:
      return static_cast<N>(l.in_channels) * l.kernel * l.kernel * l.temporal_patch * h + (l.bias ? h : 0) +
             l.positions * h +
             (l.final_norm == NormKind::kLayerNorm ? 2 * h
              : l.final_norm == NormKind::kRmsNorm ? h
                                                   : 0);
    case LayerKind::kConv: {
      N k = 1;
      for (int d = 0; d < l.dims; ++d) {
        k *= static_cast<N>(l.kernel);
      }
      return static_cast<N>(l.in_channels) * k * l.out_channels + l.out_channels +
             static_cast<N>(l.positions) * l.out_channels;
    }
    case LayerKind::kEmbedding:
      return l.vocab * h + l.positions * h;
    case LayerKind::kLmHead:  // plus the final norm on its input, where it has one (Llama's model.norm)
      return (l.tied ? 0 : l.vocab * h) + (l.final_norm == NormKind::kNone ? 0 : h);
    case LayerKind::kMlpProjector:
      if (h == 0) return static_cast<N>(l.in_dim) * l.out_dim + (l.bias ? l.out_dim : 0);  // one linear layer
      return l.in_dim * h + h * l.out_dim + (l.bias ? h + l.out_dim : 0);
    case LayerKind::kResnetBlock: {
      const N ci = static_cast<N>(l.in_channels), co = static_cast<N>(l.out_channels);
      N convs = 9 * ci * co + co + 9 * co * co + co;
      N skip = ci != co ? ci * co + co : 0;
      N time = l.time_embed_dim * co + co;
      return convs + skip + time + 2 * (ci + co);  // + group norm scales and shifts
    }
    case LayerKind::kSpatialTransformer: {
      const N c = h;
      N proj = 2 * (c * c + c);
      N self = 4 * c * c;
      N cross = 2 * c * c + 2 * l.context_dim * c;
      N ffn = (l.gated_mlp ? 3 : 2) * c * l.ffn_hidden;
      return proj + self + cross + ffn + 8 * c;
    }
  }
  return 0;
}

}  // namespace

int64_t LayerParams(const Layer& l) {
  // 2^50, a million times any real layer: a model's at most kMaxModelLayers
  // (spec/model.h) of them sum below 2^62.
  constexpr double kMaxParams = 1125899906842624.0;
  if (const double p = ParamsAs<double>(l); !(p <= kMaxParams)) {
    throw Error(
        fmt::format("a {} layer of {:.3g} parameters; valid: at most 2^50 (1.1e15): its widths multiply past "
                    "what Loom counts",
                    LayerKindName(l.kind), p));
  }
  return ParamsAs<int64_t>(l);
}

double LayerParamsOnTpRank(const Layer& l, int tp) {
  const double all = static_cast<double>(LayerParams(l));
  const double h = static_cast<double>(l.hidden);
  double whole = 0;  // of `all`, what every rank holds
  switch (l.kind) {
    case LayerKind::kTransformer:
      // Each norm's scale (ParamsAs counts a LayerNorm's bias nowhere yet: the
      // zoo's stand-in layers default to LayerNorm where the Llamas they copy
      // have RMSNorm, docs/cost-model.md).
      whole = (l.cross_attention && l.self_attention ? 3 : 2) * h + (l.out_bias ? h : 0) + (l.mlp_bias ? h : 0) +
              (l.qk_norm ? 2 * static_cast<double>(l.HeadDim()) : 0);
      break;
    case LayerKind::kEmbedding:
      whole = static_cast<double>(l.positions) * h;
      break;
    case LayerKind::kLmHead:
      whole = l.final_norm == NormKind::kNone ? 0 : h;
      break;
    case LayerKind::kMlpProjector:
      whole = h > 0 && l.bias ? static_cast<double>(l.out_dim) : 0;
      break;
    case LayerKind::kPatchEmbed:
    case LayerKind::kConv:
      whole = all;
      break;
    case LayerKind::kConformer:
    case LayerKind::kResnetBlock:
    case LayerKind::kSpatialTransformer:
      break;
  }
  return (all - whole) / tp + whole;
}

LayerWork EstimateLayerWork(const Layer& l, const TokenStats& t, int tp, double e) {
  LayerWork w;
  const double h = static_cast<double>(l.hidden);
  const double f = static_cast<double>(l.ffn_hidden);
  switch (l.kind) {
    case LayerKind::kTransformer:
      if (l.self_attention) AddSelfAttention(w, l, t, tp, e);
      if (l.cross_attention) {
        AddCrossAttention(w, t.tokens, t.context_tokens, t.cross, h, static_cast<double>(l.context_dim), tp, e);
      }
      AddGemm(w, t.tokens, h, f * (MlpMatrices(l) - 1), tp, e);  // up (and gate)
      AddGemm(w, t.tokens, f, h, tp, e);                         // down
      w.tp_allreduce_bytes += e * t.tokens * h;
      // Two norms and two residual adds on h (replicated across TP), the activation on f.
      AddElementwise(w, e * t.tokens * (10 * h + (MlpMatrices(l)) * f / tp));
      break;
    case LayerKind::kConformer:
      AddSelfAttention(w, l, t, tp, e);
      for (int k = 0; k < 2; ++k) {
        AddGemm(w, t.tokens, h, f, tp, e);
        AddGemm(w, t.tokens, f, h, tp, e);
      }
      AddGemm(w, t.tokens, h, 2 * h, tp, e);                               // conv module pointwise in (GLU)
      AddConv(w, t.tokens, static_cast<double>(l.conv_kernel), h, tp, e);  // depthwise
      AddGemm(w, t.tokens, h, h, tp, e);                                   // pointwise out
      w.tp_allreduce_bytes += 3 * e * t.tokens * h;
      AddElementwise(w, e * t.tokens * (16 * h + 4 * f / tp));
      break;
    case LayerKind::kPatchEmbed:
      AddConv(w, t.tokens, static_cast<double>(l.in_channels * l.kernel * l.kernel * l.temporal_patch), h, tp, e);
      break;
    case LayerKind::kConv: {
      double k = 1;
      for (int d = 0; d < l.dims; ++d) {
        k *= static_cast<double>(l.kernel);
      }
      double positions = t.Downscaled(static_cast<double>(l.spatial_divisor)).tokens;
      AddConv(w, positions * static_cast<double>(l.stride), k * static_cast<double>(l.in_channels),
              static_cast<double>(l.out_channels), tp, e);
      break;
    }
    case LayerKind::kEmbedding:
      // A gather: no FLOPs; the weight gradient is a scatter-add of the same rows.
      w.at(Phase::kForward, OpClass::kElementwise).bytes += 2 * e * t.tokens * h;
      w.at(Phase::kBackwardWeight, OpClass::kElementwise).bytes += 3 * e * t.tokens * h;
      break;
    case LayerKind::kLmHead:
      AddGemm(w, t.tokens, h, static_cast<double>(l.vocab), tp, e);
      // The loss's fp32 passes over the logits: 12 B per token and
      // vocabulary entry forward, 8 B backward, as set for autograd's
      // cross_entropy. The runtime's chunked loss (runtime/cross_entropy.h)
      // moves about 6 B forward and 20 B backward in bf16: 26 B against 20 B
      // priced, under 1% of a step; kept so the golden plans' times stand.
      w.at(Phase::kForward, OpClass::kElementwise).bytes += 3 * 4 * t.tokens * l.vocab / tp;
      w.at(Phase::kBackwardData, OpClass::kElementwise).bytes += 2 * 4 * t.tokens * l.vocab / tp;
      break;
    case LayerKind::kMlpProjector:
      if (l.hidden == 0) {  // one linear layer
        AddGemm(w, t.tokens, static_cast<double>(l.in_dim), static_cast<double>(l.out_dim), tp, e);
        w.tp_allreduce_bytes += e * t.tokens * static_cast<double>(l.out_dim);
        break;
      }
      AddGemm(w, t.tokens, static_cast<double>(l.in_dim), h, tp, e);
      AddGemm(w, t.tokens, h, static_cast<double>(l.out_dim), tp, e);
      w.tp_allreduce_bytes += e * t.tokens * static_cast<double>(l.out_dim);
      AddElementwise(w, 2 * e * t.tokens * h);
      break;
    case LayerKind::kResnetBlock: {
      TokenStats s = t.Downscaled(static_cast<double>(l.spatial_divisor));
      double ci = static_cast<double>(l.in_channels), co = static_cast<double>(l.out_channels);
      AddConv(w, s.tokens, 9 * ci, co, tp, e);
      AddConv(w, s.tokens, 9 * co, co, tp, e);
      if (l.in_channels != l.out_channels) {
        AddConv(w, s.tokens, ci, co, tp, e);
      }
      AddElementwise(w, e * s.tokens * 4 * (ci + co));  // two group norms + SiLU
      break;
    }
    case LayerKind::kSpatialTransformer: {
      TokenStats s = t.Downscaled(static_cast<double>(l.spatial_divisor));
      AddGemm(w, s.tokens, h, h, tp, e);  // proj_in
      Layer self = l;
      self.causal = false;
      AddSelfAttention(w, self, s, tp, e);
      AddCrossAttention(w, s.tokens, s.context_tokens, s.cross, h, static_cast<double>(l.context_dim), tp, e);
      AddGemm(w, s.tokens, h, f * (MlpMatrices(l) - 1), tp, e);
      AddGemm(w, s.tokens, f, h, tp, e);
      AddGemm(w, s.tokens, h, h, tp, e);  // proj_out
      AddElementwise(w, e * s.tokens * (14 * h + MlpMatrices(l) * f / tp));
      break;
    }
  }
  return w;
}

double ActivationBytes(const Layer& l, const TokenStats& t, int tp, Recompute policy, double e,
                       bool sequence_parallel) {
  const double h = static_cast<double>(l.hidden);
  const double f = static_cast<double>(l.ffn_hidden);
  // What Megatron keeps whole on every TP rank without sequence parallelism,
  // and splits along the sequence with it.
  const double rep = sequence_parallel ? static_cast<double>(tp) : 1.0;
  switch (l.kind) {
    case LayerKind::kTransformer:
    case LayerKind::kConformer: {
      if (policy == Recompute::kFull) {
        return e * t.tokens * h / rep;  // the layer input only
      }
      double ffns = l.kind == LayerKind::kConformer ? 2 : 1;
      // Replicated: norm inputs and outputs (4h). Split over TP: Q, K, V, the
      // attention output (2q + 2kv), the MLP up output(s) and activation output
      // (a gated MLP keeps gate and up and their product: fused SwiGLU, which
      // recomputes the SiLU). Q/K norms (Qwen3) keep their inputs too.
      const double q = QWidth(l), kv = KvWidth(l);
      double per_token = 4 * h / rep + ((l.self_attention ? 2 * q + 2 * kv : 0) + ffns * MlpMatrices(l) * f) / tp;
      if (l.qk_norm) per_token += (q + kv) / tp;
      if (l.kind == LayerKind::kConformer) {
        per_token += 4 * h / rep + 4 * h / tp;  // extra norms, conv module
      }
      // + the fp32 log-sum-exp per head (flash attention). Not priced: each
      // norm's fp32 rstd (and LayerNorm's mean), 4-8 B a row, under 0.1% of a layer.
      double bytes = e * t.tokens * per_token + 4.0 * t.tokens * l.heads / tp;
      if (l.cross_attention) {
        bytes += e * (t.tokens * (2 * h / rep + 2 * h / tp) + t.context_tokens * 2 * h / tp);
      }
      if (policy == Recompute::kSelective) {
        bytes -= e * t.tokens * ffns * f / tp;  // the activation output, recomputed from its input
      }
      return bytes;
    }
    case LayerKind::kPatchEmbed:
      return e * t.tokens * static_cast<double>(l.in_channels * l.kernel * l.kernel * l.temporal_patch);
    case LayerKind::kConv:
      return e * t.tokens * static_cast<double>(l.stride * l.in_channels);
    case LayerKind::kEmbedding:
      return 0;  // token ids only
    // Recomputation checkpoints transformer layers only (Megatron-LM's
    // --recompute-granularity, the runtime's Checkpoint): the head and the
    // projector keep what they keep under every policy.
    case LayerKind::kLmHead:  // its input, and the logits the loss keeps (runtime/cross_entropy.h)
      return e * t.tokens * h / rep + e * t.tokens * l.vocab / tp;
    case LayerKind::kMlpProjector:
      return e * t.tokens * (static_cast<double>(l.in_dim) + 2 * h / tp);
    case LayerKind::kResnetBlock: {
      TokenStats s = t.Downscaled(static_cast<double>(l.spatial_divisor));
      double ci = static_cast<double>(l.in_channels), co = static_cast<double>(l.out_channels);
      return policy == Recompute::kFull ? e * s.tokens * ci : e * s.tokens * (2 * ci + 3 * co);
    }
    case LayerKind::kSpatialTransformer: {
      TokenStats s = t.Downscaled(static_cast<double>(l.spatial_divisor));
      if (policy == Recompute::kFull) {
        return e * s.tokens * h;
      }
      return e * (s.tokens * (8 * h + MlpMatrices(l) * f / tp) + s.context_tokens * 2 * h / tp);
    }
  }
  return 0;
}

double WeightGradHoldBytes(const Layer& l, const TokenStats& t, int tp, double e, bool sequence_parallel,
                           bool weight_gradient) {
  if (!weight_gradient) return 0;
  const double h = static_cast<double>(l.hidden), f = static_cast<double>(l.ffn_hidden);
  const double rep = sequence_parallel ? static_cast<double>(tp) : 1.0;
  switch (l.kind) {
    case LayerKind::kTransformer: {
      if (l.cross_attention) break;  // not built by the runtime
      const double q = QWidth(l), kv = KvWidth(l), ups = l.gated_mlp ? 2 : 1;
      // Inputs: both norm outputs, the attention output, the activation.
      // Gradients: Q, K, V, the up projection(s); o's and down's whole.
      const double per_token = 2 * h / rep + (q + f) / tp + (q + 2 * kv + ups * f) / tp + 2 * h;
      return e * t.tokens * per_token;
    }
    case LayerKind::kLmHead:  // the (normed) input, the logits' gradient
      return e * t.tokens * (h / rep + static_cast<double>(l.vocab) / tp);
    case LayerKind::kMlpProjector:  // linear_1's input and gradient, linear_2's input and gradient
      return e * t.tokens * (static_cast<double>(l.in_dim) + 2 * h / tp + static_cast<double>(l.out_dim));
    case LayerKind::kPatchEmbed:  // the patches and the embedding's gradient
      return e * t.tokens * (static_cast<double>(l.in_channels * l.kernel * l.kernel * l.temporal_patch) + h);
    case LayerKind::kConv:  // each output token's window of inputs, and its gradient
      return e * t.tokens * static_cast<double>(l.in_channels * l.kernel + l.out_channels);
    case LayerKind::kEmbedding:
      return 0;  // a lookup: its gradient is made in B
    default:
      break;
  }
  return ActivationBytes(l, t, tp, Recompute::kNone, e, sequence_parallel);
}

int64_t LossChunkRows(int64_t vocab) {
  constexpr int64_t kChunkBytes = int64_t{256} << 20;
  return std::max<int64_t>(1, kChunkBytes / (4 * std::max<int64_t>(vocab, 1)));
}

double BackwardWorkingBytes(const Layer& l, const TokenStats& t, int tp, double e, bool weight_gradient,
                            bool ring_attention) {
  const double h = static_cast<double>(l.hidden), f = static_cast<double>(l.ffn_hidden);
  switch (l.kind) {
    case LayerKind::kLmHead: {
      const double vocab = static_cast<double>(l.vocab);
      const double chunk = std::min(t.tokens, static_cast<double>(LossChunkRows(l.vocab)));
      // The chunk's fp32 probabilities, and below fp32 the fp32 copy of its
      // logits softmax(dtype=float) makes first (ATen's, on a CPU and for
      // bf16 on CUDA; CUDA reads fp16 as it is: there an upper bound by 4 B a
      // chunk entry, ~0.3% of the head's bytes).
      const double chunk_bytes = e < 4 ? 8 : 4;
      return (e * t.tokens + chunk_bytes * chunk) * vocab / tp;
    }
    case LayerKind::kTransformer:
    case LayerKind::kConformer: {
      // quick_gelu (CLIP's) is x * sigmoid(1.702 x) in several ops, whose
      // backward makes more intermediates than the fused GELU and SiLU kernels.
      const double values = l.activation == Activation::kQuickGelu ? 5 : l.gated_mlp ? 4 : (e < 4 ? 3 : 2);
      double working = e * t.tokens * values * f / tp;
      if (ring_attention) {  // both kinds attend
        const double tile_keys = std::min(t.tokens, static_cast<double>(kRingKeyTile));
        // In fp32 whatever the compute dtype (the ring's online softmax, runtime/torch_model.cpp).
        working = std::max(working, kRingTileCopies * 4 * static_cast<double>(l.heads) / tp * t.tokens * tile_keys);
      }
      return working + (e < 4 && weight_gradient ? 2 * h * f / tp : 0);
    }
    case LayerKind::kPatchEmbed: {
      // Its weight's fp32 gradient (the master weight's, in either
      // precision), made whole before autograd adds it to the one the
      // earlier microbatches left; its few rows of patches hold little else.
      // tiny-omni's video embedding (1,536 x 32, whole on each TP rank) made
      // its first stage 1.10x the prediction at TP 2 x PP 2 without it; with
      // it 0.98-0.99x in fp32, 1.02-1.04x in bf16 (1F1B, ZB-H1).
      const double weight = static_cast<double>(l.in_channels * l.kernel * l.kernel * l.temporal_patch) * h;
      return weight_gradient ? 4 * weight : 0;
    }
    default:
      return 0;
  }
}

}  // namespace loom
