// Prices one layer for one microbatch under a parallel configuration: forward,
// backward-data and backward-weight time on one GPU of its group (TP
// all-reduces and CP all-gathers on the critical path, recomputation folded into
// the backward), the activations it keeps, and its useful FLOPs. Kernel times
// come from the cluster's CostModel (cost/cost_model.h). The one stage pricer
// (sim/price_execution.h) and the strategies' own estimates call it.
#pragma once

#include <vector>

#include "loom/cost/cp_assignment.h"
#include "loom/cost/frozen.h"
#include "loom/cost/layer_work.h"
#include "loom/cost/token_stats.h"
#include "loom/spec/cluster.h"
#include "loom/spec/module.h"

namespace loom {

struct LayerTimes {
  double forward_s = 0, backward_data_s = 0, backward_weight_s = 0, activation_bytes = 0, transient_bytes = 0;
  double flops = 0;  // useful FLOPs on one GPU (recompute excluded)
  // Held from a split backward's B to its W instead of activation_bytes
  // (cost/layer_work.h WeightGradHoldBytes).
  double weight_grad_hold_bytes = 0;
  // Of forward_s and backward_weight_s, the seconds the SMs wait for a
  // communication the phase cannot hide (ZeRO-3's per-layer gathers slower
  // than the layer's compute): idle time, counted in the bubble, not busy.
  double forward_wait_s = 0, backward_wait_s = 0;
};

struct LayerParallelism {
  int tp = 1;               // tensor-parallel degree of the layer's group
  int cp = 1;               // context-parallel degree
  double cp_imbalance = 1;  // the busiest CP rank's attention pairs over 1/cp of them (cost/cp_assignment.h)
  CpSplit cp_split = CpSplit::kIdeal;  // kBalanced gathers K/V whole, as bitfield masks do; the others run a ring
  bool split = true;        // false: heads do not divide by tp; the group shares sequences instead
  Recompute recompute = Recompute::kNone;
  bool fsdp = false;                       // ZeRO-3: weights all-gathered per layer (prefetched, overlapping compute)
  int fsdp_ranks = 1;                      // the group the weights are sharded over
  Precision precision = Precision::kBf16;  // element size of activations and weights, and the peak to use
  // Megatron-LM sequence parallelism: norms and dropout-free residual work split
  // along the sequence over the TP group (activation memory only; the
  // reduce-scatter + all-gather move what the all-reduce moved).
  bool sequence_parallel = false;
};

// Whether a module's attention heads divide by tp; modules that do not are
// replicated across the TP group, each rank taking 1/tp of their sequences.
bool SplitsOverTensorParallel(const Module& module, int tp);

LayerTimes PriceLayer(const Layer& layer, const TokenStats& module_tokens, const BackwardNeeds& needs,
                      const Cluster& cluster, const LayerParallelism& par);

// Tokens of `ranks` ranks that split the sequences between them, per rank.
TokenStats ShareOfSequences(TokenStats tokens, int ranks);

// Output width of a layer: elements per token it hands the next layer.
double OutWidth(const Layer& layer);

// The most a whole backward holds beyond its stage's kept activations, from
// a stage's layers in forward order: it runs them last to first (autograd
// takes the most recently created node first: the runtime's layers run in
// stage order, towers side by side included), each holding its transient
// bytes while it runs and, once done, freeing its kept bytes. So a bottom
// layer's large working set (a patch embedding's fp32 weight gradient, an
// embedding's FSDP unit) comes when the layers above have freed theirs, not
// beside all of them.
double BackwardTransientBytes(const std::vector<LayerTimes>& layers);

// The most a split backward's B (ZB-H1, PipeWeaver) holds beyond its stage's
// kept activations, from the stage's layers in forward order: B runs them
// last to first, each holding its transient bytes while it runs and, once
// done, its weight-gradient hold in place of its kept bytes. Under full
// recomputation the holds build up past the kept layer inputs as B goes.
double SplitBackwardTransientBytes(const std::vector<LayerTimes>& layers);

}  // namespace loom
