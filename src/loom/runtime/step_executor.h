// Runs a worker process's share of each step's schedule, one action at a
// time, the way the simulator prices them (sim/simulator.h): a short switch
// over the closed set of action kinds calls one method per kind. Beside it:
// where the process sits (process_layout.h), its groups (process_groups.h),
// ZeRO's shards (zero_shards.h), the optimizer step (optimizer_steps.h),
// message routing (message_routing.h), the messages in flight (mailbox.h) and
// the device's timing and streams (action_clock.h).
// Only runtime translation units include this header (it includes libtorch).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "loom/data/sample.h"
#include "loom/error.h"
#include "loom/plan/execution_plan.h"
#include "loom/runtime/action_clock.h"
#include "loom/runtime/c10d_calls.h"
#include "loom/runtime/gradient_buffers.h"
#include "loom/runtime/loss_scaler.h"
#include "loom/runtime/mailbox.h"
#include "loom/runtime/message_routing.h"
#include "loom/runtime/optimizer_steps.h"
#include "loom/runtime/process_groups.h"
#include "loom/runtime/process_layout.h"
#include "loom/runtime/torch_model.h"
#include "loom/runtime/training_options.h"
#include "loom/runtime/training_state.h"
#include "loom/runtime/worker_reports.h"
#include "loom/runtime/zero_shards.h"
#include "loom/spec/model.h"

namespace loom::runtime {

class FsdpLayers;

// What the executor needs of its worker's options.
// A failure of the worker's own, not a dead peer's consequence: a step whose
// loss or gradient norm is not finite (without --skip-nonfinite; every process
// raises it alike, from the same all-reduced norm), a checkpoint it cannot
// restore. A fault-tolerant worker ends at once with it rather than waiting
// for the launcher's command.
struct OwnFailure : Error {
  using Error::Error;
};

struct ExecutorOptions {
  int seed = 0;  // the workload's: every copy of a layer starts from the same weights
  TrainingOptions training;      // the learning-rate schedule, weight decay, clipping, non-finite steps
  int steps = 1;                 // the run's steps (the schedule's span unless training.decay_steps)
  bool reports_metrics = false;  // this process reports each step's Metrics (the first of its node)
  bool sm_quotas = true;   // CUDA: co-located ranks on green-context streams
  bool layerwise = false;  // heterogeneous pipeline templates: gradients summed per layer segment
  std::string weights_dir;  // a Hugging Face checkpoint folder the stages start from ("": the seeded weights)
  // What the layers compute in (kBFloat16: bf16 mixed precision over fp32
  // master weights, compute_copies.h ComputeCopies); activations and the
  // messages between stages are in it.
  torch::ScalarType compute_dtype = torch::kFloat;
  // fp16 mixed precision: the loss scaling (runtime/loss_scaler.h); absent
  // for bf16 and fp32, whose range needs none.
  std::optional<LossScaleOptions> loss_scale;
};

// One worker process's stages, groups and optimizer state for a run (a
// generation of a fault-tolerant run), and the steps it runs with them.
// Construction makes every group and builds the stages from `first` (step
// first_step's compile); a later step's ExecutionPlan must place stages the
// same way. Not thread-safe: one per process; not copyable (its parts point
// at each other).
class StepExecutor {
 public:
  StepExecutor(const Model& model, const ExecutionPlan& first, int rank, int world, const torch::Device& device,
               const GroupMaker& maker, AbortFlag abort, const ExecutorOptions& options, WorkerReports& reports);
  ~StepExecutor();
  StepExecutor(const StepExecutor&) = delete;
  StepExecutor& operator=(const StepExecutor&) = delete;

  // Runs step `step` of `exec` (compiled for `batch`): this process's
  // actions in ProcessOrder, then its optimizer steps; reports its time, its
  // loss (from the process that holds it) and, when `last_step`, its actions'
  // intervals. `before_action` runs before each action (fault injection).
  // `stop_asked`: this process was asked to stop (a signal); returns whether
  // any process was, so that all stop after the same step.
  bool RunStep(int step, const ExecutionPlan& exec, const Batch& batch, bool last_step,
               const std::function<void()>& before_action, bool stop_asked = false);

  // Every trainable parameter with its rank's optimizer (a fault-tolerant
  // run's training state, runtime/training_state.h).
  std::vector<std::tuple<std::string, torch::Tensor, FusedAdamW*>> Trainable() { return optimizers_->Trainable(); }
  TrainingState CaptureLive();
  // Bytes of every parameter of this process's stages.
  double WeightBytes() const;
  // Reports "param SUM SUMSQ ABSSUM" per tensor of every unit's replica 0
  // (every replica holds the same after the sync), frozen ones too (they must
  // come back unchanged); a sharded weight's statistics are summed over its
  // TP shards, so they describe the whole tensor. ZeRO-3 weights are gathered first.
  void ReportWeights(const ExecutionPlan& exec);
  // Writes this process's share of the weights to `path`, a checkpoint part
  // (`loom run --save`, weights/checkpoint_parts.h) in `dtype`: replica 0's
  // stages, each TP rank its slices and TP rank 0 the whole tensors, CP part
  // 0 alone. Call after ReportWeights (ZeRO-3's weights gathered).
  void SaveHfPart(const ExecutionPlan& exec, const std::string& path, torch::ScalarType dtype);

  // A training checkpoint (weights/run_checkpoint.h): writes this process's
  // share of the weights and AdamW state to part file `path` (replica 0's
  // stages, CP part 0; every ZeRO shard), and restores them from `reader`
  // (each process its own plan's share), the fp16 loss scale included.
  void SaveCheckpointPart(const ExecutionPlan& exec, const std::string& path);
  void RestoreCheckpoint(const weights::RunCheckpointReader& reader);
  // What the next step's batch cost the data path (batch_loader.h): reported with its Metrics.
  void SetDataTimes(double wait_s, double load_s) {
    data_wait_s_ = wait_s;
    data_load_s_ = load_s;
  }
  // Returns once every process of the run called it (a checkpoint's save).
  void Barrier();
  // fp16's loss scale for the manifest (null for bf16 and fp32).
  const LossScaler* loss_scaler() const { return scaler_ ? &*scaler_ : nullptr; }

  const ProcessPlace& place() const { return place_; }
  // The group of every process of the run (a fault-tolerant run's state exchange).
  GroupBase& world() const { return *groups_.world; }

 private:
  // One step's state: what its actions hand each other. Reset by RunStep.
  struct Step;

  void Run(int r, const Action& a);
  void Forward(int r, const Action& a);
  void Backward(int r, const Action& a);  // kBackward and kBackwardData (ZB: weight gradients wait for W)
  void BackwardWeight(const Action& a);
  void Send(int r, const Action& a);
  void Receive(int r, const Action& a);
  void Collective(const Action& a);
  void Wait(int r);
  // The local stages whose gradient buckets `exec`'s collectives all-reduce
  // whole (not ZeRO-2/3's scatters), in place in their GradientBuffers.
  std::set<int> StagesSummedWhole(const ExecutionPlan& exec) const;
  // The step's end once every action ran: shared gradient sums, the global
  // norm and loss (the non-finite check), clipping and the optimizer steps.
  // Returns the step's Metrics.
  report::Metrics StepOptimizers(int step, const std::vector<std::pair<int, int>>& stepping, bool stop_asked,
                                 bool* stop);
  // fp16: divides every gradient this process steps by the loss scale and
  // says whether all of the run's are finite (one all-reduce over every process).
  bool UnscaleRunGradients();
  // A skipped step's gradients, dropped as an optimizer step would.
  void DropGradients();

  // Forward's inputs: stage v's microbatch k assembled from its messages.
  ModuleTensors Inputs(int r, int v, int k, const std::string& where);
  // Backward's gradient of each tensor stage v's microbatch k handed on,
  // summed over every consumer microbatch it went to.
  std::vector<torch::Tensor> HandedGradients(int r, int v, int k);
  // The flat shapes of what stage v hands on of the sequences of `packing`
  // (a microbatch's on a part of its group, or what a message carries of it).
  std::vector<torch::Tensor> ShapesOf(int v, const MicrobatchPacking& packing);
  Message MessageOf(int u, const MicrobatchPacking& packing, const torch::Tensor& flat);
  torch::Tensor TowerLoss(int v, const ModuleTensors& out) const;
  // The gradient a backward starts from at a loss: 1, or fp16's loss scale.
  torch::Tensor LossGradient(const torch::Tensor& loss) const;
  // This process's share of the batch's loss (0 where it reports none: TP
  // shards past the first compute the same loss), and whether it has one.
  std::pair<double, bool> LossShare() const;
  void ReportLoss(int step);

  // Constant for the run.
  const Model& model_;
  const ProcessPlace place_;
  const torch::Device device_;
  const AbortFlag abort_;
  const int loss_module_;
  const torch::ScalarType compute_dtype_;
  const TrainingOptions training_;
  const int steps_;
  const bool reports_metrics_;
  WorkerReports& reports_;
  ProcessGroups groups_;
  // Changed by the actions (weights, gradients) and the optimizer steps.
  LocalStages local_;
  std::unique_ptr<ZeroShards> zero_;
  std::unique_ptr<GradientBuffers> grad_buffers_;    // the in-place all-reduced buckets' gradients
  std::map<int, std::shared_ptr<FsdpLayers>> fsdp_;  // ZeRO-3 stages: their layers' gathers (the stacks' hooks)
  std::unique_ptr<OptimizerSteps> optimizers_;
  std::unique_ptr<ActionClock> clock_;
  std::optional<LossScaler> scaler_;  // fp16: the loss scale, updated after every step
  // This step's.
  std::unique_ptr<Step> step_;
  double data_wait_s_ = 0, data_load_s_ = 0;
};

}  // namespace loom::runtime
