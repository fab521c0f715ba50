// ZeRO (the plan's zero_stage with data parallelism), stage by stage:
//   1: each replica keeps AdamW state for its 1/D slice of every gradient
//      bucket only, steps that slice and all-gathers the updated weights
//      (AdamW is elementwise: the replicated update, computed once);
//   2: each bucket's gradients are summed once a step (an in-place
//      all-reduce of its gradient buffer, the collective the simulator
//      prices), each replica keeping the sum of its slice only; the whole
//      gradients exist from the stage's first backward to that sum;
//   3 (FSDP): one bucket per layer, whose full weights exist only around
//      that layer's forward and backward (runtime/fsdp_layers.h), and whose
//      gradients are reduce-scattered after each backward (the slices are
//      the only copy in between).
// ZeRO-1/2 stages hold each bucket's weights as one flat tensor in the
// compute dtype, padded to D chunks (HoldFlatWeights), which the all-gather
// after each step refreshes: in fp32 the parameters are views of it and the
// master slice is its own chunk (no second fp32 copy); under mixed precision
// it holds the 16-bit weights and the fp32 values live in the master slices
// alone (the parameters' fp32 storage is released: compute_copies.h), as
// Megatron's distributed optimizer keeps them and cost/memory.h prices them.
// Stages holding a tied embedding's copy shard at ZeRO-1 at most (the
// compiled plan caps them; StageOf refuses one that was not): the copy's
// gradient is summed with the other copy's at the step, after the buckets,
// and needs it whole (ZeRO-1's shards are views of the whole gradients).
// Only runtime translation units include this header (it includes libtorch).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <vector>

#include "loom/plan/execution_plan.h"
#include "loom/runtime/process_groups.h"
#include "loom/runtime/tensor_buckets.h"

namespace loom::runtime {

// This replica's slice [lo, hi) of a gradient bucket's flat parameters
// (chunks of `chunk` elements per replica, the last one short), with the
// AdamW state of only that slice (`master`).
struct ShardedBucket {
  int stage = 0, bucket = 0;
  int64_t total = 0, chunk = 0, lo = 0, hi = 0;
  torch::Tensor master;
  torch::Tensor weights;  // ZeRO-1/2: the bucket's weights [chunk x D] in the compute dtype (HoldFlatWeights)
};

// Where a shard's slice [lo, hi) of its bucket's flat parameters meets each
// parameter: `param` indexes the bucket, [begin, begin + length) is in the
// parameter's own flattened elements, and `at` is where that range starts in
// the shard's master. Parameters the slice does not reach are left out.
struct ShardRange {
  size_t param = 0;
  int64_t begin = 0, length = 0, at = 0;
};
std::vector<ShardRange> ShardRanges(const ShardedBucket& sb, const std::vector<torch::Tensor>& bucket);

// The ZeRO state of one process's stages. Not thread-safe; holds references
// to `buckets` and `groups`, which must outlive it.
class ZeroShards {
 public:
  // Slices every bucket of each sharded stage (its data-parallel group has
  // two or more members, zero_stage >= 1, and no tied embedding), and gives
  // back ZeRO-3 stages' full weights.
  ZeroShards(const ExecutionPlan& exec, StageBuckets& buckets, const ProcessGroups& groups,
             const std::function<bool(int)>& holds_tied, AbortFlag abort);

  bool Sharded(int v) const { return sharded_.count(v) > 0; }
  bool Scattered(int v) const { return scattered_.count(v) > 0; }  // ZeRO-2/3
  bool Fsdp(int v) const { return fsdp_.count(v) > 0; }            // ZeRO-3
  // Stage v's parameters hold no fp32 values of their own (ZeRO-3, and ZeRO-1/2
  // under mixed precision): GatherWeights gives them back.
  bool Released(int v) const { return fsdp_.count(v) > 0 || released_.count(v) > 0; }
  const std::set<int>& fsdp() const { return fsdp_; }
  std::vector<ShardedBucket>& shards() { return shards_; }

  // ZeRO-1/2 stage v (not ZeRO-3): each bucket's weights made one flat tensor
  // in `dtype` (ShardedBucket::weights). `dtype` the parameters' own: they
  // become views of it and each master slice its chunk. Else the parameters'
  // storage is released and the (parameter, its weight in dtype) pairs
  // returned, for the stage's ComputeCopies to hold (LayerStack::HoldWeights).
  // Before the optimizers are made (they point at the masters).
  std::vector<std::pair<torch::Tensor, torch::Tensor>> HoldFlatWeights(int v, torch::ScalarType dtype);

  // Parameter p of ZeRO-1/2 stage v set to `value` (a checkpoint's): into its
  // flat weights where the stage holds them, cast to their dtype.
  void SetWeights(int v, const torch::Tensor& p, const torch::Tensor& value);

  // One bucket's full weights from every replica's slice (ZeRO-1/2 after
  // each step, into its flat weights; ZeRO-3 before each use), blocking, over
  // the stage's group. `scratch`: where to gather (its first chunk x members
  // elements), where it is defined and that large; else a buffer made for
  // the call. `into_parameters`: into the fp32 parameters themselves, their
  // storage made again where released (the run's end: reports, --save).
  void GatherBucket(const ShardedBucket& sb, const torch::Tensor& scratch = torch::Tensor(),
                    bool into_parameters = false);
  // ZeRO-3: every slice's gradient zeroed (made, after an optimizer step
  // dropped it) at a step's start, so that it is held the whole step as the
  // memory model counts it (cost/memory.h: the sharded gradient is model
  // state); each layer's reduce-scatter adds into it. Every slice takes a
  // gradient each step regardless (the reduce-scatters give zeros where a
  // parameter has none), so AdamW steps the same slices as before.
  void HoldSliceGradients();
  // Stage v's full fp32 weights gathered into its parameters (ZeRO-3 and
  // released stages), or their memory given back (ZeRO-3).
  void GatherWeights(int v);
  void ReleaseWeights(int v);
  // ZeRO-3 one bucket at a time (runtime/fsdp_layers.h: a bucket per layer).
  // Each is a collective over the stage's group: every member calls them in
  // the same order. A bucket without a shard (no trainable parameters) is a
  // no-op. ReduceScatterGradients sums the bucket's gradients (zeros where a
  // parameter has none) over the group into this replica's slice, adding to
  // its master's gradient, and drops the full gradients.
  void GatherBucket(int v, int bucket);
  void ReleaseBucket(int v, int bucket);
  void ReduceScatterGradients(int v, int bucket);

  // The ZeRO stage that stage v of `exec` runs under on this process: 0 where
  // its data-parallel group has no other member or it holds a tied embedding
  // (ZeroShards' constructor decides the same way).
  static int StageOf(const ExecutionPlan& exec, const ProcessGroups& groups, int v, bool holds_tied);

 private:
  StageBuckets& buckets_;
  const ProcessGroups& groups_;
  AbortFlag abort_;
  std::map<int, int> dp_group_;        // stage -> its communication group
  ShardedBucket* Find(int v, int bucket);

  std::vector<ShardedBucket> shards_;  // never resized after construction (optimizers point into it)
  std::set<int> sharded_, scattered_, fsdp_, released_;
};

}  // namespace loom::runtime
