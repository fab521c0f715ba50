// A worker process's optimizer step, after every other action of its step:
// the gradient sums that happen only there (Megatron's tied word embeddings,
// Oobleck's layer segments), then each schedule rank's AdamW over what it
// owns (the replicated parameters, or its ZeRO slices), then ZeRO's gathers of
// the updated weights. Every member reaches each collective in the same order
// (tie order, model order, group order), so none can deadlock.
// Only runtime translation units include this header (it includes libtorch).
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "loom/plan/execution_plan.h"
#include "loom/runtime/process_groups.h"
#include "loom/runtime/tensor_buckets.h"
#include "loom/runtime/torch_model.h"
#include "loom/runtime/zero_shards.h"
#include "loom/spec/model.h"

namespace loom::runtime {

// The layer stacks of one process's stages, and their gradient buckets.
struct LocalStages {
  std::map<int, LayerStack> stacks;
  StageBuckets buckets;
};

// Megatron's tied word embeddings: where a replica's embedding and tied head
// are different stages, each holds the matrix and their gradients are summed
// before the optimizer step (here if this process holds both, else over the
// pair of processes).
struct Tie {
  int embedding_stage = -1, head_stage = -1;
  std::vector<torch::Tensor> tensors;  // the copies this process holds
  Group group;                         // null: this process holds both
};

// Layer segments (Oobleck, Fig. 2.9): consecutive layers held by the same
// processes, each summed over them with one all-reduce at the step, as the
// simulator prices them (SegmentSyncTime_s); from the compiled plan's
// kLayerSegment groups.
struct Segment {
  Group group;
  std::vector<torch::Tensor> params;  // this process's copies
};

// The ties of this process's stages (making their pair groups).
std::vector<Tie> MakeTies(const Model& model, const ExecutionPlan& exec, const ProcessPlace& place,
                          const LocalStages& local, const GroupMaker& maker);
// Whether stage v holds a copy of a tied matrix.
bool HoldsTied(const std::vector<Tie>& ties, const LocalStages& local, int v);
// The layer segments of a plan with heterogeneous pipeline templates.
std::vector<Segment> MakeSegments(const Model& model, const ExecutionPlan& exec, const ProcessPlace& place,
                                  const LocalStages& local, const GroupMaker& maker);

// Per schedule rank, the optimizers of its stages (a rank's optimizer step
// updates its own stages only: ranks taking turns on one group step apart).
struct RankOptimizer {
  std::unique_ptr<torch::optim::AdamW> replicated, sharded;
  std::vector<ShardedBucket*> shards;
};

class OptimizerSteps {
 public:
  OptimizerSteps(const ExecutionPlan& exec, const ProcessPlace& place, LocalStages& local, ZeroShards& zero,
                 std::vector<Tie> ties, std::vector<Segment> segments, double learning_rate, AbortFlag abort);

  // The optimizer steps of schedule ranks `ranks` (this step's, in action order).
  void Step(const std::vector<int>& ranks);

  // Every trainable parameter of this process's stages, by name, with its
  // rank's optimizer: what a fault-tolerant run's training state carries.
  // Throws loom::Error where a parameter's optimizer is sharded.
  std::vector<std::tuple<std::string, torch::Tensor, torch::optim::AdamW*>> Trainable();

 private:
  std::map<int, int> stage_rank_;  // local stage -> its schedule rank
  std::map<int, int> dp_group_;    // local stage -> its communication group
  LocalStages& local_;
  ZeroShards& zero_;
  std::vector<Tie> ties_;
  std::vector<Segment> segments_;
  AbortFlag abort_;
  std::map<int, RankOptimizer> optimizers_;
};

}  // namespace loom::runtime
