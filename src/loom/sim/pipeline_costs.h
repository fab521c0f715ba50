// What the simulator needs to time one pipeline replica: per (virtual stage,
// microbatch) compute times and memory, per rank resident bytes, per stage
// gradient-sync time, and the link between neighbouring pipeline ranks.
// Built by sim/megatron_costs.h from a model, or by hand in tests. Plain value.
#pragma once

#include <vector>

#include "loom/spec/cluster.h"

namespace loom {

struct StageCost {
  double forward_s = 0;
  double backward_data_s = 0;  // includes recomputation when activations were dropped
  double backward_weight_s = 0;
  double activation_bytes = 0;  // kept from the forward until the backward finishes
  double transient_bytes = 0;   // extra live bytes while the backward runs (recomputed activations)
  // Under a split backward, held from the end of B to the end of W in place
  // of activation_bytes: the deferred weight gradients' inputs and output
  // gradients (cost/layer_work.h WeightGradHoldBytes).
  double weight_grad_hold_bytes = 0;
  // Under a split backward, the most B holds beyond activation_bytes while it
  // runs: the layers' holds for W build up as it goes, last layer first
  // (cost/layer_pricing.h SplitBackwardTransientBytes).
  double split_backward_transient_bytes = 0;
  double send_bytes = 0;        // the stage's output activation; its gradient has the same size
  // Of forward_s and backward_weight_s, time the SMs wait on communication
  // the phase cannot hide (LayerTimes::forward_wait_s): not busy.
  double forward_wait_s = 0, backward_wait_s = 0;
};

struct PipelineCosts {
  std::vector<std::vector<StageCost>> stage;  // [virtual stage][microbatch]
  std::vector<double> static_bytes;           // per rank: weights, gradients, optimizer state
  // Per virtual stage: gradient bytes held beyond static_bytes from its first
  // backward to its rank's last compute end (the sync follows it). ZeRO-2's
  // whole gradients: Loom's ZeRO-2 sums each bucket once a step, after the
  // last microbatch's backward (runtime/zero_shards.h), so its memory is the
  // slices alone between steps and before the first backward only.
  std::vector<double> backward_grad_bytes;
  std::vector<double> grad_sync_s;            // per virtual stage: data-parallel sync of its gradients
  std::vector<double> optimizer_s;            // per rank: its optimizer step; empty: free
  Link p2p;                                   // between neighbouring pipeline ranks

  const StageCost& at(int v, int mb) const { return stage[v][mb]; }
};

}  // namespace loom
