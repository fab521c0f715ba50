// LayerWork: what one layer costs for a given set of tokens, split by phase
// (forward, backward-data, backward-weight: the zero-bubble split of Cornstarch
// Eq. 3.1) and by op class (GEMM, attention core, elementwise, convolution),
// as FLOPs and bytes moved to and from device memory. Device time comes from
// these through the roofline in device_time.h. Formulas: docs/cost-model.md.
#pragma once

#include <array>
#include <cstdint>

#include "loom/cost/token_stats.h"
#include "loom/spec/layer.h"

namespace loom {

enum class OpClass : uint8_t { kGemm = 0, kAttention = 1, kElementwise = 2, kConv = 3 };
inline constexpr int kNumOpClasses = 4;
enum class Phase : uint8_t { kForward = 0, kBackwardData = 1, kBackwardWeight = 2 };
inline constexpr int kNumPhases = 3;

struct OpWork {
  double flops = 0;
  double bytes = 0;
};

struct LayerWork {
  // work[phase][op class]
  std::array<std::array<OpWork, kNumOpClasses>, kNumPhases> work{};
  // Bytes each TP rank all-reduces per forward (the same again in backward-data):
  // the row-parallel outputs of attention and MLP (Megatron-LM TP without SP).
  double tp_allreduce_bytes = 0;

  OpWork& at(Phase p, OpClass c) { return work[static_cast<int>(p)][static_cast<int>(c)]; }
  const OpWork& at(Phase p, OpClass c) const { return work[static_cast<int>(p)][static_cast<int>(c)]; }
  double Flops(Phase p) const;
  double Bytes(Phase p) const;
  LayerWork& operator+=(const LayerWork& o);
};

// Activation recomputation policy (Korthikanti et al. 2022 terms).
enum class Recompute : uint8_t {
  kNone,       // keep every activation the backward needs
  kSelective,  // recompute the cheap elementwise parts (MLP activation output)
  kFull,       // keep only each layer's input; the backward re-runs the forward
};

// Trainable parameters of one layer (biases and norm scales included where the
// architecture has them; docs/cost-model.md lists the per-kind formulas).
int64_t LayerParams(const Layer& layer);

// What one rank of a TP group of `tp` holds of a layer's parameters, as
// Megatron-LM and Loom's runtime split them: the matmuls' weights, the
// column-parallel biases (Q/K/V, the MLP's up and gate, a projector's first
// linear) and the vocabulary rows by tp; the norms, the row-parallel biases
// (the attention's output, the MLP's down, a projector's second linear), the
// q/k norms, learned position tables, patch embeddings and convolutions whole
// on every rank (Megatron's LayerNorm and RowParallelLinear bias; the
// runtime's replicated layers, docs/runtime.md). Every matrix of the kinds the
// runtime does not run (conformer, U-Net blocks) by tp. REQUIRES: tp >= 1.
double LayerParamsOnTpRank(const Layer& layer, int tp);

// Work of `layer` on `tokens` with tensor parallel degree `tp` (every matrix
// split tp ways, norms replicated), elements of `bytes_per_elem` bytes.
// REQUIRES: tp >= 1.
LayerWork EstimateLayerWork(const Layer& layer, const TokenStats& tokens, int tp, double bytes_per_elem = 2);

// Bytes of activations one TP rank keeps from this layer's forward until its
// backward, under `policy`. Korthikanti et al. 2022 (Table 2) with flash
// attention (no s^2 attention scores; fp32 softmax statistics instead) and no
// dropout (none of the zoo's models trains with it): per token of a transformer
// layer, norm inputs and the QKV / MLP inputs (4h) are replicated over the TP
// group unless `sequence_parallel` splits them too; Q, K, V, the attention
// output, the MLP up output(s) and activation output split over TP.
double ActivationBytes(const Layer& layer, const TokenStats& tokens, int tp, Recompute policy,
                       double bytes_per_elem = 2, bool sequence_parallel = false);

// Bytes one TP rank holds from the end of this layer's input-gradient pass
// (B) to the end of its weight pass (W) under a split backward (ZB-H1,
// PipeWeaver): B frees the kept activations but each deferred matmul keeps
// its input and its output's gradient (runtime/torch_model.h
// WeightGradDeferral, as Zero Bubble's W needs). Per token of a transformer
// layer: the two norm outputs (split along the sequence under
// `sequence_parallel`: GatheredMatmuls gathers them again in W), the attention
// output and the MLP activation (split over TP), the gradients of Q, K, V and
// the up projection(s) (split), and the o and down projections' output
// gradients, [tokens, h] on every rank with or without sequence parallelism.
// Recomputation does not change it: B re-runs the forward first. 0 when
// `weight_gradient` is false (a frozen layer defers nothing). Kinds the
// runtime does not build keep what the forward kept (ActivationBytes).
double WeightGradHoldBytes(const Layer& layer, const TokenStats& tokens, int tp, double bytes_per_elem = 2,
                           bool sequence_parallel = false, bool weight_gradient = true);

// Rows of logits the loss turns into fp32 probabilities at a time
// (runtime/cross_entropy.h): as many as fit 256 MiB of fp32, at least one.
// The memory model prices one such chunk beside the logits' gradient.
int64_t LossChunkRows(int64_t vocab);

// Bytes one TP rank holds beyond the kept activations while this layer's
// backward runs (measured on the runtime:
// ActivationMemory.TheBackwardHoldsWhatTheMemoryModelPricesBeyondTheKeptBytes):
//  - the LM head: the logits' gradient in the compute dtype, plus one chunk
//    of fp32 probabilities (LossChunkRows rows; runtime/cross_entropy.h
//    computes the loss's backward a chunk at a time) and, in bf16 or fp16,
//    the chunk's fp32 copy of the logits softmax makes first; over TP as
//    the runtime's vocabulary-parallel loss splits them (runtime/cross_entropy.h
//    VocabParallelCrossEntropy, as Megatron's);
//  - a transformer layer: its MLP's backward, the gradients of the up
//    projection's outputs and of the activation (a fused GELU or SiLU: 2 f
//    values a token, 3 f in bf16; gated: 4 f, gate, up, their product and the
//    recomputed SiLU; CLIP's quick_gelu, several unfused ops: 5 f), plus under
//    mixed precision the bf16 gradient of one h x f weight before it is added
//    to the fp32 one (not when `weight_gradient` is false: a frozen layer's
//    backward computes none);
//    Under ring attention (`ring_attention`: context parallelism over a
//    causal or bidirectional mask, runtime/context_parallel.h) its attention's
//    backward comes after the MLP's and holds kRingTileCopies fp32 tiles of
//    scores, [heads / tp, rows, kRingKeyTile]: the larger of the two counts;
//  - a patch embedding: its weight's fp32 gradient before autograd adds it
//    to the accumulated one (whole on every TP rank, as the weight).
// Other kinds: 0 (not measured).
double BackwardWorkingBytes(const Layer& layer, const TokenStats& tokens, int tp, double bytes_per_elem = 2,
                            bool weight_gradient = true, bool ring_attention = false);

// Keys the runtime's ring attention scores at a time (flash attention's
// online softmax over key tiles, runtime/context_parallel.cpp), and the
// tiles of [heads, rows, kRingKeyTile] its backward holds at once (the
// probabilities and, in place of dP, the scores' gradient). The runtime's
// ring is a portable one (flash attention's kernels keep their tiles on
// chip): its tiles are priced because they are what runs. tiny-omni under
// CP 2 held five such tiles per step of the ring at first, 1.25x the
// predicted peak; two, 1.09x.
inline constexpr int64_t kRingKeyTile = 64;
inline constexpr double kRingTileCopies = 2;

}  // namespace loom
