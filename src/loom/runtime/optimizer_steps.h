// A worker process's optimizer step, after every other action of its step:
// the gradient sums that happen only there (Megatron's tied word embeddings,
// Oobleck's layer segments), then each schedule rank's AdamW over what it
// owns (the replicated parameters, or its ZeRO slices), then ZeRO's gathers of
// the updated weights. Every member reaches each collective in the same order
// (tie order, model order, group order), so none can deadlock.
// Only runtime translation units include this header (it includes libtorch).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "loom/plan/execution_plan.h"
#include "loom/runtime/fused_adamw.h"
#include "loom/runtime/gradient_buffers.h"
#include "loom/runtime/process_groups.h"
#include "loom/runtime/tensor_buckets.h"
#include "loom/runtime/torch_model.h"
#include "loom/runtime/training_options.h"
#include "loom/runtime/zero_shards.h"
#include "loom/spec/model.h"
#include "loom/weights/run_checkpoint.h"

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
  torch::Tensor embedding, head_copy;  // which of them is which (undefined: held elsewhere)
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
// Whether a parameter name is a stage's copy of a tied embedding in its head ("{module}_{L}.tied_table").
bool IsTiedHeadCopy(const std::string& name);
// The layer segments of a plan with heterogeneous pipeline templates.
std::vector<Segment> MakeSegments(const Model& model, const ExecutionPlan& exec, const ProcessPlace& place,
                                  const LocalStages& local, const GroupMaker& maker);

// Per schedule rank, the optimizers of its stages (a rank's optimizer step
// updates its own stages only: ranks taking turns on one group step apart).
// The replicated optimizer has two parameter groups, decayed (tensors of two
// or more dimensions) and not; the sharded one steps flat ZeRO slices that mix
// both, so it has no decay of its own and `decay` applies it (below).
struct RankOptimizer {
  std::unique_ptr<FusedAdamW> replicated, sharded;
  std::vector<ShardedBucket*> shards;
  // Ranges [offset, offset + length) of a shard's master that hold decayed tensors.
  struct DecayRange {
    ShardedBucket* shard = nullptr;
    int64_t offset = 0, length = 0;
  };
  std::vector<DecayRange> decay;
};

// One term of the run's squared gradient norm: `scale` times the squared norm
// of a gradient (or of elements [offset, offset + length) of a ZeRO slice's
// gradient). `scale` is 1 / the number of processes holding an equal copy of
// those gradients, so that the sum over every process counts each once.
struct NormTerm {
  torch::Tensor param;              // whose .grad()
  int64_t offset = 0, length = -1;  // -1: the whole tensor
  double scale = 1;
};

// The run's gradients' global L2 norm and the batch's loss, as every process
// knows them after one all-reduce over the run: what the step's clipping and
// non-finite check read, and what the step reports.
struct StepNorm {
  double grad_norm = 0;
  double loss = 0;
  bool stop = false;  // some process was asked to stop (a signal, with checkpoints): all stop after this step
  bool Finite() const;
};

class OptimizerSteps {
 public:
  OptimizerSteps(const ExecutionPlan& exec, const ProcessPlace& place, LocalStages& local, ZeroShards& zero,
                 std::vector<Tie> ties, std::vector<Segment> segments, const ProcessGroups& groups,
                 const TrainingOptions& training, const torch::Device& device, AbortFlag abort);

  // The gradient sums that happen only at the step, in the order every
  // partner reaches them: Megatron's tied word embeddings, then Oobleck's
  // layer segments. Before Norm: a tied copy's gradient is only a part until then.
  void SumShared();
  // A collective over the whole run (every process calls it once a step,
  // after SumShared): the global gradient norm, each gradient counted once
  // however many processes hold it (TP-replicated tensors, data-parallel and
  // CP copies, tied copies, layer segments), and the loss from each
  // process's `loss_share`. torch.nn.utils.clip_grad_norm_'s total_norm.
  // `stop`: this process was asked to stop (StepNorm::stop: any was).
  StepNorm Norm(double loss_share, bool stop = false);
  // Scales every gradient the optimizers read by clip / (norm + 1e-6) where
  // that is below 1 (clip_grad_norm_'s clip_coef); a no-op for clip 0.
  void Clip(double grad_norm, double clip);
  // The optimizer steps of schedule ranks `ranks` (this step's, in action
  // order) at learning rate `lr`, then ZeRO's gathers of the updated weights,
  // each ZeRO-1 bucket's into its gradient buffer (`buffers`, whose
  // gradients the steps have read), as Megatron's distributed optimizer
  // gathers into its contiguous buffer: no bucket-sized buffer beside it.
  void Step(const std::vector<int>& ranks, double lr, GradientBuffers* buffers = nullptr);

  // A training checkpoint (weights/run_checkpoint.h): this process's share as
  // a part file's tensors and metadata. `first_holder(v)`: whether stage v's
  // replicated tensors are this process's to write (the plan's replica 0, CP
  // part 0); of those, TP rank 0 writes the tensors TP does not split. Each
  // ZeRO shard is written by its holder as a range. `keep` owns the bytes.
  struct CheckpointShare {
    std::vector<torch::Tensor> keep;
    std::vector<weights::TensorToWrite> tensors;
    std::map<std::string, std::string> metadata;
  };
  CheckpointShare CheckpointPart(const std::function<bool(int)>& first_holder);
  // Every trainable parameter of this process's stages and its AdamW state
  // from `reader`, cut to this plan's share (TP slice, ZeRO range). Throws
  // loom::Error naming the tensor where the checkpoint lacks it or holds
  // another shape (a checkpoint of another model).
  void Restore(const weights::RunCheckpointReader& reader);

  // Every trainable parameter of this process's stages, by name, with its
  // rank's optimizer: what a fault-tolerant run's training state carries.
  // Throws loom::Error where a parameter's optimizer is sharded.
  std::vector<std::tuple<std::string, torch::Tensor, FusedAdamW*>> Trainable();

 private:
  std::map<int, int> stage_rank_;  // local stage -> its schedule rank
  std::map<int, int> dp_group_;    // local stage -> its communication group
  LocalStages& local_;
  ZeroShards& zero_;
  std::vector<Tie> ties_;
  std::vector<Segment> segments_;
  GroupBase& world_;
  const double weight_decay_;
  const torch::Device device_;
  AbortFlag abort_;
  std::map<int, RankOptimizer> optimizers_;
  std::vector<NormTerm> norm_terms_;
  std::map<const void*, std::string> name_of_;  // a stage parameter's name
  std::map<int, std::pair<int, int>> tp_of_;    // local stage -> (its TP rank, its TP degree)

  // Every gradient the optimizers read: replicated stages' parameters' and ZeRO slices' (UnscaleRunGradients' set).
  std::vector<torch::Tensor> GradientsRead() const;
};

}  // namespace loom::runtime
