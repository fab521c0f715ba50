#include "loom/cost/layer_pricing.h"

#include <algorithm>

#include "loom/cost/collectives.h"
#include "loom/cost/cost_model.h"
#include "loom/cost/device_time.h"
#include "loom/cost/memory.h"

namespace loom {

namespace {

bool HasAttention(const Layer& l) {
  return l.kind == LayerKind::kTransformer || l.kind == LayerKind::kConformer ||
         l.kind == LayerKind::kSpatialTransformer;
}

// Context parallelism splits every sequence over cp ranks: each does 1/cp of
// the tokens and, ideally, of the attention pairs; `imbalance` is how much
// more the busiest rank's split of the actual masks gives it.
TokenStats PerCpRank(TokenStats t, int cp, double imbalance) {
  t.tokens /= cp;
  t.sum_sq = t.sum_sq / cp * imbalance;
  t.mask_pairs = t.mask_pairs / cp * imbalance;
  t.cross /= cp;
  return t;
}

}  // namespace

// A module whose heads do not divide by TP is replicated across the TP group,
// each rank taking 1/tp of its sequences (MMScale §7 on Megatron-LM: "we
// replicate the encoder and generator across the GPUs within the TP group").
TokenStats ShareOfSequences(TokenStats t, int ranks) {
  t.tokens /= ranks;
  t.sum_sq /= ranks;
  t.mask_pairs /= ranks;
  t.sequences /= ranks;
  t.context_tokens /= ranks;
  t.cross /= ranks;
  return t;
}

bool SplitsOverTensorParallel(const Module& m, int tp) {
  if (tp <= 1) return true;  // (on the pricing hot path: most stages of big plans)
  for (const auto& l : m.layers) {
    if (HasAttention(l) && l.heads % tp != 0) return false;
  }
  return true;
}

double OutWidth(const Layer& l) {
  switch (l.kind) {
    case LayerKind::kMlpProjector:
      return static_cast<double>(l.out_dim);
    case LayerKind::kConv:
    case LayerKind::kResnetBlock:
      return static_cast<double>(l.out_channels);
    default:
      return static_cast<double>(l.hidden);  // lm-head logits stay on the last stage
  }
}

LayerTimes PriceLayer(const Layer& l, const TokenStats& module_tokens, const BackwardNeeds& needs, const Cluster& c,
                      const LayerParallelism& par) {
  const TokenStats full = par.split ? module_tokens : ShareOfSequences(module_tokens, par.tp);
  const int tp = par.split ? par.tp : 1;
  // Under CP a module's data is embedded (patches, token ids, a conv stem)
  // and its convs run over whole sequences on every rank, each keeping its
  // own rows after (runtime/torch_model.cpp, LayerStack's forward): a conv
  // reads neighbouring tokens, and an embedding splices its input modules'
  // tokens whole. Priced as that runs: whole sequences, on each rank (priced
  // on a share, tiny-omni's patch matrices made CP 2 1.09-1.10x its
  // predicted peak).
  const bool whole = l.kind == LayerKind::kPatchEmbed || l.kind == LayerKind::kConv || l.kind == LayerKind::kEmbedding;
  const TokenStats t = whole ? full : PerCpRank(full, par.cp, par.cp_imbalance);
  const double elem = ElementBytes(par.precision);
  const LayerWork w = EstimateLayerWork(l, t, tp, elem);
  LayerTimes out;
  // Tensor-parallel all-reduces sit on the critical path inside the layer
  // (Megatron-LM without communication overlap): added to compute time.
  const double tp_s = GroupAllReduceTime_s(w.tp_allreduce_bytes, tp, 1, c);
  // Context parallelism all-gathers K and V of the whole sequence per attention layer.
  double cp_s = 0;
  if (par.cp > 1 && HasAttention(l)) {
    double kv = static_cast<double>(l.kv_heads) * static_cast<double>(l.HeadDim());
    cp_s = GroupAllGatherTime_s(2 * full.tokens * kv * elem / tp, par.cp, tp, c);
  }
  const ComputeTimes kernels = CostModelOf(c).LayerCompute(l, t, tp, w, c.gpu, par.precision);
  out.forward_s = kernels.forward_s + tp_s + cp_s;
  out.flops = w.Flops(Phase::kForward);
  if (needs.data) {
    out.backward_data_s = kernels.backward_data_s + tp_s + cp_s;
    out.flops += w.Flops(Phase::kBackwardData);
  }
  if (needs.weight) {
    out.backward_weight_s = kernels.backward_weight_s;
    out.flops += w.Flops(Phase::kBackwardWeight);
  }
  if (whole) out.flops /= par.cp;  // every CP rank repeats them: useful once
  if (needs.data || needs.weight) {
    const bool sp = par.sequence_parallel && tp > 1;
    out.activation_bytes = ActivationBytes(l, t, tp, par.recompute, elem, sp);
    double kept_all = ActivationBytes(l, t, tp, Recompute::kNone, elem, sp);
    out.weight_grad_hold_bytes = WeightGradHoldBytes(l, t, tp, elem, sp, needs.weight);
    if (par.recompute == Recompute::kFull) {
      out.backward_data_s += out.forward_s;  // re-run the forward inside the backward
      out.transient_bytes = kept_all - out.activation_bytes;
    } else if (par.recompute == Recompute::kSelective) {
      out.backward_data_s += kernels.forward_elementwise_s;
      out.transient_bytes = kept_all - out.activation_bytes;
    }
    // Under ZB's split backward the weight gradient comes in W, not here:
    // priced in B all the same (W's working set is that gradient alone).
    // The runtime's ring (context_parallel.cpp RingAttention): CP over a
    // plain mask; bitfield masks (mask_pairs counted) and the balanced split
    // gather K/V whole instead.
    const bool ring = par.cp > 1 && par.cp_split != CpSplit::kBalanced && t.mask_pairs == 0;
    // A patch embedding's working set is its weight's fp32 gradient, made
    // whole beside the one earlier microbatches left; under ZeRO-3 that
    // gradient is the unit's whole gradient, priced with its gathered
    // weights below (each microbatch's is reduce-scattered and dropped), not
    // twice (tiny-omni's video embedding, 192 KiB: its ZeRO-3 stages 0.88-0.90x).
    const bool fsdp_grad = par.fsdp && par.fsdp_ranks > 1 && l.kind == LayerKind::kPatchEmbed;
    out.transient_bytes += BackwardWorkingBytes(l, t, tp, elem, needs.weight && !fsdp_grad, ring);
  }
  if (par.fsdp && par.fsdp_ranks > 1) {
    // ZeRO-3 / FSDP: every microbatch all-gathers the layer's weights before its
    // forward and again before its backward, and reduce-scatters its gradients;
    // prefetching overlaps them with compute, so a phase takes the longer of the two.
    const double rank_params = LayerParamsOnTpRank(l, tp);  // what this TP rank gathers and reduces
    const double weight_bytes = elem * rank_params;
    const double gather_s = GroupAllGatherTime_s(weight_bytes, par.fsdp_ranks, 1, c);
    out.forward_wait_s = std::max(0.0, gather_s - out.forward_s);
    out.forward_s += out.forward_wait_s;
    if (needs.weight) {  // re-gather + reduce-scatter
      out.backward_wait_s = std::max(0.0, 2 * gather_s - out.backward_weight_s);
      out.backward_weight_s += out.backward_wait_s;
      // While its backward runs the layer's full weights are gathered and its
      // full fp32 gradient builds up (then copied into the reduce-scatter's
      // buffer as it is dropped): FSDP's one unit unsharded, what the
      // runtime's FsdpLayers holds too (runtime/fsdp_layers.h).
      out.transient_bytes += weight_bytes + kGradBytesPerParam * rank_params;
    }
  }
  return out;
}

namespace {

// Over `layers` (forward order) run last to first, the most one holds while
// it runs beyond the stage's kept activations: its transient bytes, on top of
// what the layers run before it left (their kept bytes freed, their holds for
// W kept where `holds`).
double PeakOverBackward(const std::vector<LayerTimes>& layers, bool holds) {
  double live = 0, peak = 0;
  for (auto l = layers.rbegin(); l != layers.rend(); ++l) {
    peak = std::max(peak, live + l->transient_bytes);
    live += (holds ? l->weight_grad_hold_bytes : 0.0) - l->activation_bytes;
  }
  return peak;
}

}  // namespace

double BackwardTransientBytes(const std::vector<LayerTimes>& layers) { return PeakOverBackward(layers, false); }

double SplitBackwardTransientBytes(const std::vector<LayerTimes>& layers) { return PeakOverBackward(layers, true); }

}  // namespace loom
