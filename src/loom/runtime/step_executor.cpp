#include "loom/runtime/step_executor.h"

#include <fmt/format.h>
#include <torch/csrc/autograd/engine.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <set>

#include "loom/data/sample_token_checks.h"
#include "loom/error.h"
#include "loom/plan/compile_plan.h"
#include "loom/plan/sequence_parallel_handoff.h"
#include "loom/runtime/fsdp_layers.h"
#include "loom/runtime/hf_weights.h"
#include "loom/runtime/runnable_plan.h"
#include "loom/runtime/sends_in_flight.h"
#include "loom/runtime/tensor_buckets.h"
#include "loom/runtime/unscale_gradients.h"
#include "loom/weights/checkpoint_parts.h"

namespace loom::runtime {

namespace {

// Per layer of stage v, the recomputation microbatch k of replica r runs with.
std::vector<Recompute> LayerRecompute(const ExecutionPlan& e, int r, int v, int k) {
  const auto& per_layer = e.replicas[r][v][k].layer_recompute;
  if (!per_layer.empty()) return per_layer;
  return std::vector<Recompute>(e.stages[v].num_layers(), e.stages[v].recompute);
}

// Per (stage, microbatch) of this process's schedule ranks `ranks`: how many
// times the step reads its output's values (an activation send; a forward of
// the same rank reading it as input, StepExecutor::Inputs). An over-count only
// keeps the values to the step's end.
std::map<std::pair<int, int>, int> OutputReads(const Schedule& sch, const StepEdges& edges,
                                               const std::vector<int>& ranks) {
  std::map<std::pair<int, int>, int> reads;
  for (int r : ranks) {
    for (const Action& a : sch.ranks[r]) {
      if (a.kind == ActionKind::kSend && a.payload == Payload::kActivation) ++reads[{a.stage, a.microbatch}];
      if (a.kind != ActionKind::kForward) continue;
      for (const StageEdge* e : edges.in[a.stage]) {
        if (sch.stage_rank[e->from] != r) continue;
        for (int j : Producers(*e, a.microbatch)) ++reads[{e->from, j}];
      }
    }
  }
  return reads;
}

}  // namespace

// The batch's real text where its samples carry token ids (TextTokens; null:
// synthetic text), each sample checked again as the launcher checked its line
// (data/sample_token_checks.h: vocabularies, image tokens).
std::unique_ptr<TextTokens> RealText(const Model& model, const Batch& b) {
  if (b.samples.empty() || !b.samples[0].tokens) return nullptr;
  auto text = std::make_unique<TextTokens>();
  for (const Sample& s : b.samples) {
    if (!s.tokens) throw Error("runtime: a batch mixes samples with and without token ids");
    if (!s.tokens->has_ids) {  // a sample no stage of this process runs (batch_loader.h loads the others)
      text->ids.push_back({{}});
      text->labels.push_back({{}});
      continue;
    }
    CheckSampleTokens(model, *s.tokens);
    text->ids.push_back({s.tokens->input_ids});
    text->labels.push_back({s.tokens->labels});
  }
  return text;
}

// What the batch's loss averages over: with real text, the targets it scores
// (transformers' shift: the first label of each sample scores nothing, -100
// neither), else every text token (BatchTextTokens).
int64_t ScoredTargets(const Batch& b, const TextTokens* text) {
  if (!text) return BatchTextTokens(b);
  int64_t n = 0;  // from each sample's count: this process holds the ids of its own samples only
  for (const Sample& s : b.samples) n += s.tokens->scored;
  return std::max<int64_t>(n, 1);
}

struct StepExecutor::Step {
  Step(const Model& model, const ExecutionPlan& e, const Batch& b, const ProcessPlace& place, int step_index)
      : exec(e),
        batch(b),
        step(step_index),
        handed(StageOutputs(model, e)),
        loss_stage(LossStages(model, e)),
        tower_ends(TowerEnds(model, e)),
        edges(e.schedule),
        packings(model, b, e, place),
        text(RealText(model, b)),
        images(RealImages(b)),
        batch_text_tokens(ScoredTargets(b, text.get())),
        sends(e.schedule),
        output_reads(OutputReads(e.schedule, edges, place.local_ranks)),
        sp_rows(SequenceParallelHandoffsOf(model, e)) {
    for (int v = 0; v < e.schedule.num_stages(); ++v)
      microbatches = std::max(microbatches, e.schedule.microbatches_of(v));
    // Towers beside the loss module: their values in the whole batch (TowerLoss).
    for (const auto& ends : tower_ends) {
      for (int m : ends) {
        if (tower_values.count(m)) continue;
        std::vector<int> all(b.samples.size());
        std::iota(all.begin(), all.end(), 0);
        const int64_t tokens = PackMicrobatch(model, b, all).Tokens(m);
        tower_values[m] =
            static_cast<double>(std::max<int64_t>(1, tokens)) *
            static_cast<double>(OutputWidth(model, m, static_cast<int>(model.modules[m].layers.size()) - 1));
      }
    }
  }

  const ExecutionPlan& exec;
  const Batch& batch;
  const int step;
  int microbatches = 0;  // the most of any stage (message tags)
  const std::vector<std::vector<BoundaryTensor>> handed;
  const std::vector<bool> loss_stage;
  const std::vector<std::vector<int>> tower_ends;
  const StepEdges edges;
  StepPackings packings;
  const std::unique_ptr<TextTokens> text;  // the samples' token ids; null: synthetic text
  const std::unique_ptr<ImagePixels> images;  // their pixels; null: synthetic images
  const int64_t batch_text_tokens;
  std::map<int, double> tower_values;
  // Per (stage, mb): what it hands on (the loss, on a loss stage), in
  // StageOutputs order; the messages it read; weight gradients the W pass owes.
  std::map<std::pair<int, int>, std::vector<torch::Tensor>> output;
  // Per (stage, mb), each output's gradient edge (its graph, which the
  // backward starts from) and the reads of its values still to come.
  std::map<std::pair<int, int>, std::vector<torch::autograd::Edge>> output_edges;
  std::map<std::pair<int, int>, int> output_reads;
  std::map<std::pair<int, int>, std::set<Message*>> read;
  Mailbox mail;
  std::map<std::pair<int, int>, std::vector<WeightGradDeferral::Pending>> deferred;
  // The step's loss terms, read (.item()) only once the step is done: a read
  // waits for the device, and one after a module's forward would keep the
  // host from launching a co-located module beside it.
  std::vector<torch::Tensor> loss_terms;
  bool holds_loss = false;
  std::map<std::pair<int, int>, torch::Tensor> tower_losses;  // (stage, mb) -> its towers' loss (not the loss stage)
  // Sends in flight (the communication stream), dropped as soon as their
  // receivers are known to have them; gradient all-reduces, until the wait.
  SendsInFlight sends;
  std::vector<std::tuple<WorkHandle, std::vector<at::Tensor>, int, int>> reducing;  // (work, flat, stage, bucket)
  std::set<int> summed_whole;  // local stages whose buckets are all-reduced whole (StagesSummedWhole)
  // Stages that hand on, or receive, each TP rank's own sequence rows.
  const SequenceParallelHandoffs sp_rows;

  // (v, k)'s output values, read once more. After their last read only the
  // graph stays (output_edges) and shapes (meta tensors), as Megatron-LM's
  // deallocate_output_tensor keeps a sent output's grad_fn only: else every
  // microbatch in flight held its stage's output (and under sequence
  // parallelism its gathered rows) until its backward, which the simulator
  // does not price (tiny-llm at TP 2 x PP 2: 1.07x the prediction).
  std::vector<torch::Tensor> ReadOutput(std::pair<int, int> key) {
    std::vector<torch::Tensor> values;
    for (const torch::Tensor& t : output.at(key)) values.push_back(t.detach());
    auto left = output_reads.find(key);
    if (left != output_reads.end() && --left->second == 0) {
      for (torch::Tensor& t : output.at(key)) {
        torch::Tensor shape = torch::empty(t.sizes(), t.options().device(torch::kMeta));
        t = t.requires_grad() ? shape.requires_grad_(true) : shape;
      }
    }
    return values;
  }
};

StepExecutor::StepExecutor(const Model& model, const ExecutionPlan& first, int rank, int world,
                           const torch::Device& device, const GroupMaker& maker, AbortFlag abort,
                           const ExecutorOptions& options, WorkerReports& reports)
    : model_(model),
      place_(PlaceProcess(first, rank)),
      device_(device),
      abort_(abort),
      loss_module_(static_cast<int>(model.modules.size()) - 1),
      compute_dtype_(options.compute_dtype),
      training_(options.training),
      steps_(options.steps),
      reports_metrics_(options.reports_metrics),
      reports_(reports) {
  groups_ = MakeModelGroups(maker, first, place_, world);
  // This process's stages, built from the same per-layer seeds as any other
  // copy, then (with a checkpoint) loaded from its files, each TP shard its slice.
  std::optional<weights::CheckpointWeights> checkpoint;
  if (!options.weights_dir.empty()) checkpoint.emplace(options.weights_dir);
  std::vector<std::string> tensors_read;  // told the launcher, which names the checkpoint's unread ones
  for (int v = 0; v < place_.stages(); ++v) {
    if (!place_.IsLocal(v)) continue;
    TensorParallel tp = groups_.tensor_parallel.at(place_.TpOf(v));
    tp.sequence_parallel = RunsSequenceParallelism(first.stages[v]);
    LayerStack stack(model, first.stages[v].layers, options.seed, tp, groups_.context_parallel);
    stack->SetComputeDtype(options.compute_dtype);
    if (checkpoint) {
      const std::vector<std::string> read = LoadHfWeights(*stack, model, *checkpoint, tp);
      tensors_read.insert(tensors_read.end(), read.begin(), read.end());
    }
    stack->to(device);
    local_.stacks.emplace(v, std::move(stack));
  }
  if (checkpoint) reports_.Now(report::WeightsRead{std::move(tensors_read)});
  AddDataParallelGroups(groups_, maker, first, place_, options.layerwise);
  std::vector<Tie> ties = MakeTies(model, first, place_, local_, maker);
  // Gradient buckets: frozen layers get no optimizer state and no gradient
  // sync; a ZeRO-3 stage has one bucket per layer (FsdpLayers), any other
  // kGradientBuckets, as its schedule's collectives.
  for (auto& [v, stack] : local_.stacks) {
    if (ZeroShards::StageOf(first, groups_, v, HoldsTied(ties, local_, v)) >= 3) {
      local_.buckets[v] = stack->LayerTrainableParameters();
      continue;
    }
    std::vector<torch::Tensor> trainable;
    for (auto& p : stack->parameters()) {
      if (p.requires_grad()) trainable.push_back(p);
    }
    local_.buckets[v] = Buckets(trainable, kGradientBuckets);
  }
  std::vector<Segment> segments;
  if (options.layerwise) segments = MakeSegments(model, first, place_, local_, maker);
  zero_ = std::make_unique<ZeroShards>(
      first, local_.buckets, groups_, [&](int v) { return HoldsTied(ties, local_, v); }, abort);
  // ZeRO-1/2: each bucket's weights one flat tensor in the compute dtype (zero_shards.h).
  for (auto& [v, stack] : local_.stacks) stack->HoldWeights(zero_->HoldFlatWeights(v, stack->compute_dtype()));
  std::map<int, int64_t> gather_members;  // ZeRO-1 stages: a bucket's buffer holds its gather
  for (const auto& [v, buckets] : local_.buckets) {
    if (zero_->Sharded(v) && !zero_->Scattered(v)) {
      gather_members[v] = groups_.dp_place.at(first.stages[v].dp_group).second;
    }
  }
  grad_buffers_ = std::make_unique<GradientBuffers>(local_.buckets, std::move(gather_members));
  for (int v : zero_->fsdp()) {
    auto hooks = std::make_shared<FsdpLayers>(*zero_, v, local_.stacks.at(v));
    local_.stacks.at(v)->SetLayerHooks(hooks);
    fsdp_.emplace(v, std::move(hooks));
  }
  optimizers_ = std::make_unique<OptimizerSteps>(first, place_, local_, *zero_, std::move(ties), std::move(segments),
                                                 groups_, options.training, device, abort);
  if (options.loss_scale) scaler_.emplace(*options.loss_scale);
  clock_ = MakeActionClock(first, place_, device, options.sm_quotas,
                           ClockReports{[this](const WorkerMessage& m) { reports_.Step(m); },
                                        [this](const WorkerMessage& m) { reports_.Now(m); }});
}

StepExecutor::~StepExecutor() = default;

TrainingState StepExecutor::CaptureLive() {
  TrainingState state;
  for (auto& [name, p, o] : Trainable()) state[name] = CaptureParam(p, *o);
  return state;
}

double StepExecutor::WeightBytes() const {
  double bytes = 0;
  auto size = [](const torch::Tensor& t) {
    return t.defined() ? static_cast<double>(t.numel() * t.element_size()) : 0;
  };
  for (const auto& [v, stack] : local_.stacks) {
    // ZeRO-3: the slices are the weights (the full ones exist around a layer's
    // use only, counted then). ZeRO-1/2: each bucket's flat weights, and under
    // mixed precision the fp32 master slices beside them (in fp32 the master
    // is part of the weights).
    const bool sharded = zero_->Sharded(v);
    for (const auto& p : stack->parameters()) {
      if (!(sharded && p.requires_grad())) bytes += size(p);
    }
    if (!sharded) continue;
    for (const auto& sb : zero_->shards()) {
      if (sb.stage != v) continue;
      bytes += size(sb.weights);
      const bool master_in_weights = sb.weights.defined() && sb.weights.scalar_type() == sb.master.scalar_type();
      if (!master_in_weights) bytes += size(sb.master);
    }
  }
  return bytes;
}

bool StepExecutor::RunStep(int step, const ExecutionPlan& exec, const Batch& batch, bool last_step,
                           const std::function<void()>& before_action, bool stop_asked) {
  bool stop = false;
  step_ = std::make_unique<Step>(model_, exec, batch, place_, step);
  const Schedule& sch = exec.schedule;
  std::vector<std::pair<int, int>> stepping;  // (rank, action index) of this process's optimizer steps
  clock_->StartStep(last_step);
  for (auto& [v, stack] : local_.stacks) stack->SetSequenceParallelRows(step_->sp_rows.in[v], step_->sp_rows.out[v]);
  // Every whole gradient in a buffer (ZeRO-2's from its first backward, Backward; ZeRO-3 keeps slices).
  for (const auto& [v, buckets] : local_.buckets) {
    if (!zero_->Scattered(v)) grad_buffers_->Bind(v);
  }
  step_->summed_whole = StagesSummedWhole(exec);
  zero_->HoldSliceGradients();
  for (const auto& [r, index] : ProcessOrder(exec, place_.local_ranks)) {
    before_action();
    const Action& a = sch.ranks[r][index];
    if (a.kind == ActionKind::kOptimizerStep) {
      // Run after every other action of this process (below): the tied
      // embedding's sum and ZeRO's gathers are collectives that a partner
      // process reaches only at its own end.
      stepping.push_back({r, index});
      continue;
    }
    const int v = a.stage;
    // ZeRO-3: a layer's weights exist around its own use only (FsdpLayers).
    auto fsdp = a.is_compute() ? fsdp_.find(v) : fsdp_.end();
    const bool backward = a.kind == ActionKind::kBackward || a.kind == ActionKind::kBackwardData;
    if (fsdp != fsdp_.end() && backward) fsdp->second->StartBackward();
    clock_->BeginAction(r, index, a, sch, step_->edges);
    Run(r, a);
    if (fsdp != fsdp_.end()) {
      if (a.kind == ActionKind::kForward) fsdp->second->FinishForward();
      if (backward) fsdp->second->FinishBackward();
      if (a.kind == ActionKind::kBackwardWeight) fsdp->second->ReduceWeightGradients();
    }
    clock_->EndAction();
  }
  clock_->ActionsDone();
  // fp16: a step whose gradients overflowed anywhere is skipped by every
  // process (Megatron's found_inf, all-reduced over the whole run).
  const bool finite = !scaler_ || UnscaleRunGradients();
  // (An fp16 overflow leaves no norm; LossScale reports that skip.)
  report::Metrics metrics{step, std::nan(""), std::nan(""), training_.LearningRateAt(step, steps_), false};
  if (!finite) {
    DropGradients();
  } else {
    metrics = StepOptimizers(step, stepping, stop_asked, &stop);
  }
  if (scaler_) {
    if (place_.process == 0) reports_.Step(report::LossScale{step, scaler_->scale(), !finite});
    scaler_->Update(!finite);
  }
  step_->sends.WaitAll(abort_);  // every receiver has posted its receive by now
  for (auto& [v, stack] : local_.stacks) stack->ClearComputeCopies();  // the weights changed
  const double secs = clock_->EndStep();
  reports_.Step(report::StepTime{step, secs});
  metrics.seconds = secs;
  metrics.data_wait_s = data_wait_s_;
  metrics.data_load_s = data_load_s_;
  if (reports_metrics_) reports_.Step(metrics);
  if (!metrics.skipped) ReportLoss(step);  // a skipped non-finite step's loss is in its Metrics only
  step_.reset();  // the step's tensors go now, not when the next step starts
  return stop;
}

void StepExecutor::Run(int r, const Action& a) {
  switch (a.kind) {
    case ActionKind::kForward:
      return Forward(r, a);
    case ActionKind::kBackward:
    case ActionKind::kBackwardData:
      return Backward(r, a);
    case ActionKind::kBackwardWeight:
      return BackwardWeight(a);
    case ActionKind::kSend:
      return Send(r, a);
    case ActionKind::kRecv:
      return Receive(r, a);
    case ActionKind::kCollective:
      return Collective(a);
    case ActionKind::kWait:
      return Wait(r);
    case ActionKind::kOptimizerStep:
      return;  // RunStep runs them after every other action
  }
}

// The step's end: the tied embeddings' and layer segments' gradient sums (in
// tie order, as every partner), the run's gradient norm and loss (one
// all-reduce over every process, so all of them decide alike), then a
// non-finite step stopped or skipped, the gradients clipped, each rank's
// AdamW at the schedule's learning rate, and ZeRO's gathers in group order
// (every member of a group reaches them in that order).
report::Metrics StepExecutor::StepOptimizers(int step, const std::vector<std::pair<int, int>>& stepping,
                                             bool stop_asked, bool* stop) {
  // The shared sums and the norm's all-reduce wait for the other processes
  // to finish their steps: outside the optimizer's timed interval (its busy
  // time is the simulator's optimizer step), as a wait is.
  // A stage no all-reduce sums steps only what its backwards reached, as
  // torch.optim.AdamW after zero_grad(set_to_none=True).
  for (const auto& [v, buckets] : local_.buckets) {
    if (!zero_->Scattered(v) && !step_->summed_whole.count(v)) grad_buffers_->DropUnreached(v);
  }
  optimizers_->SumShared();
  const StepNorm norm = optimizers_->Norm(LossShare().first, stop_asked);
  *stop = norm.stop;
  clock_->BeginOptimizerSteps(stepping);
  report::Metrics metrics{step, norm.loss, norm.grad_norm, training_.LearningRateAt(step, steps_), false};
  if (!norm.Finite()) {
    if (!training_.skip_nonfinite) {
      // (NaN printed without its sign: "-nan" says nothing more.)
      throw OwnFailure(fmt::format(
          "training diverged at step {}: the loss is {} and the gradient norm {}; the run stops before that step "
          "changes any weight (lower --lr, check the data, or --skip-nonfinite to skip such steps)",
          step, std::isnan(norm.loss) ? std::nan("") : norm.loss, std::fabs(norm.grad_norm)));
    }
    DropGradients();
    metrics.skipped = true;
  } else {
    optimizers_->Clip(norm.grad_norm, training_.clip_grad);
    std::vector<int> ranks;
    for (const auto& [r, index] : stepping) ranks.push_back(r);
    optimizers_->Step(ranks, metrics.lr, grad_buffers_.get());
  }
  clock_->EndOptimizerSteps();
  return metrics;
}

// Every gradient this process's optimizers read: its whole gradients (ties
// and segments are summed from these in StepOptimizers: unscaling first is
// the same, the sums being linear; a ZeRO-1 shard's is a view of them) and
// ZeRO-2/3's reduced slices.
bool StepExecutor::UnscaleRunGradients() {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  for (auto& [v, stack] : local_.stacks) {
    if (zero_->Scattered(v)) continue;
    for (const auto& p : stack->parameters()) {
      if (p.grad().defined()) grads.push_back(p.grad());
    }
  }
  for (auto& sb : zero_->shards()) {
    // ZeRO-1's shards are views of the whole gradients above (Wait).
    if (zero_->Scattered(sb.stage) && sb.master.grad().defined()) grads.push_back(sb.master.grad());
  }
  const bool finite_here = runtime::UnscaleGradients(grads, scaler_->scale());
  torch::Tensor overflowed =
      torch::full({1}, finite_here ? 0.0F : 1.0F, torch::TensorOptions().device(device_).dtype(torch::kFloat));
  AllReduceSum(*groups_.world, overflowed, abort_);
  AwaitRelease(overflowed);
  return overflowed.item<float>() == 0.0F;
}

void StepExecutor::DropGradients() {
  for (auto& [v, stack] : local_.stacks) {
    for (auto& p : stack->parameters()) p.mutable_grad() = torch::Tensor();
  }
  for (auto& sb : zero_->shards()) sb.master.mutable_grad() = torch::Tensor();
}

std::pair<double, bool> StepExecutor::LossShare() const {
  const Step& s = *step_;
  bool reports = s.holds_loss;  // TP shards compute the same loss; CP ranks and sequence shares their parts
  for (int v = 0; v < place_.stages(); ++v) {
    reports =
        reports && !((s.loss_stage[v] || !s.tower_ends[v].empty()) && place_.IsLocal(v) && place_.MyTpRank(v) != 0);
  }
  if (!reports) return {0.0, false};
  double loss_sum = 0;
  for (const auto& t : s.loss_terms) loss_sum += t.item<double>();
  return {loss_sum, true};
}

void StepExecutor::ReportLoss(int step) {
  const auto [loss, reports] = LossShare();
  if (reports) reports_.Step(report::Loss{step, loss});
}

std::vector<torch::Tensor> StepExecutor::ShapesOf(int v, const MicrobatchPacking& packing) {
  std::vector<torch::Tensor> shapes;
  for (const auto& b : step_->handed[v]) {
    int64_t rows = packing.Tokens(b.module);
    // This TP rank's rows only (the receiver's TP rank is the sender's: equal degrees).
    if (step_->sp_rows.out[v]) rows = weights::SliceSpanOf(rows, place_.MyTpRank(v), place_.TpOf(v)).length;
    shapes.push_back(torch::empty({1, rows, b.width}, device_));
  }
  return shapes;
}

Message StepExecutor::MessageOf(int u, const MicrobatchPacking& packing, const torch::Tensor& flat) {
  std::vector<int> modules;
  for (const auto& b : step_->handed[u]) modules.push_back(b.module);
  return MakeMessage(modules, flat, ShapesOf(u, packing), packing);
}

torch::Tensor StepExecutor::TowerLoss(int v, const ModuleTensors& out) const {
  torch::Tensor sum;
  for (int m : step_->tower_ends[v]) {
    const torch::Tensor t = runtime::TowerLoss(out.at(m), step_->tower_values.at(m));
    sum = sum.defined() ? sum + t : t;
  }
  return sum;
}

ModuleTensors StepExecutor::Inputs(int r, int v, int k, const std::string& where) {
  Step& s = *step_;
  ModuleTensors in;
  if (s.edges.in[v].empty()) return in;
  auto& messages = s.mail.activations;
  std::vector<Message*> own, pool;
  std::map<int, int64_t> widths;  // modules arriving -> width
  for (const StageEdge* e : s.edges.in[v]) {
    const int u = e->from;
    for (const auto& b : s.handed[u]) widths[b.module] = b.width;
    for (int j : Producers(*e, k)) {
      if (s.exec.schedule.stage_rank[u] == r) {  // the producer is this rank: cut the graph here
        const MessageKey key{u, v, j, k, place_.MyPart(u)};
        if (!messages.count(key)) {
          messages.emplace(key, MessageOf(u, s.packings.At(u, j, key.part), Flatten(s.ReadOutput({u, j}), device_)));
        }
      }
      bool any = false;  // one message per producer part it pairs with
      for (auto it = messages.lower_bound(MessageKey{u, v, j, k, 0});
           it != messages.end() && it->first.from == u && it->first.to == v && it->first.mb == j &&
           it->first.consumer == k;
           ++it) {
        own.push_back(&it->second);
        any = true;
      }
      if (!any) throw Error(fmt::format("runtime: {} runs before stage {} microbatch {} reached it", where, u, j));
    }
    for (auto& [key, m] : messages) {
      if (key.from == u && key.to == v) pool.push_back(&m);
    }
  }
  std::set<Message*>& used = s.read[{v, k}];
  used.insert(own.begin(), own.end());
  if (s.sp_rows.in[v]) {
    // This TP rank's rows of the producer's output, for the same microbatch
    // (a one-to-one edge within a unit): the stage's input as it is, with no
    // sequence to splice (Assemble reads whole rows).
    auto same_sequences = [](const std::vector<PackedSequence>& a, const std::vector<PackedSequence>& b) {
      return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const PackedSequence& x, const PackedSequence& y) {
        return x.sample == y.sample && x.doc == y.doc && x.image == y.image && x.clip == y.clip && x.tokens == y.tokens;
      });
    };
    if (own.size() != 1 || own[0]->modules.size() != 1 ||
        !same_sequences(own[0]->packing->modules[own[0]->modules[0]],
                        s.packings.Mine(v, k).modules[own[0]->modules[0]])) {
      throw Error(fmt::format("runtime: {} receives sequence-parallel rows of another packing", where));
    }
    in[own[0]->modules[0]] = own[0]->leaves[0];
    ++own[0]->users;
    return in;
  }
  for (const auto& [module, width] : widths) {
    in[module] = Assemble(module, width, s.packings.Mine(v, k), own, pool, used, where,
                          torch::TensorOptions().device(device_).dtype(compute_dtype_));
  }
  for (Message* m : used) ++m->users;
  return in;
}

void StepExecutor::Forward(int r, const Action& a) {
  Step& s = *step_;
  const int v = a.stage, k = a.microbatch;
  const std::string where = fmt::format("stage {} ({}) microbatch {}", v, s.exec.stages[v].label, k);
  const ModuleTensors in = Inputs(r, v, k, where);
  const MicrobatchInput mb{&s.packings.Mine(v, k), s.step,        static_cast<int64_t>(s.batch.samples.size()), device_,
                           s.text.get(),           s.images.get()};
  ModuleTensors out = local_.stacks.at(v)->forward(in, mb, LayerRecompute(s.exec, place_.content, v, k));
  std::vector<torch::Tensor>& hands = s.output[{v, k}];
  const torch::Tensor towers = TowerLoss(v, out);
  if (s.loss_stage[v]) {
    const int CP = place_.cp;
    torch::Tensor loss = TextLoss(
        out.at(loss_module_), mb, s.batch_text_tokens,
        CP > 1 ? ContextRows(s.packings.Mine(v, k), loss_module_, place_.cp_rank, CP, groups_.context_parallel.split)
               : std::vector<int64_t>{},
        local_.stacks.at(v)->HeadVocab());
    if (towers.defined()) loss = loss + towers;
    s.loss_terms.push_back(loss.detach());
    s.holds_loss = true;
    hands.push_back(loss);
    return;
  }
  for (const auto& b : s.handed[v]) hands.push_back(out.at(b.module));
  std::vector<torch::autograd::Edge>& edges = s.output_edges[{v, k}];
  for (const torch::Tensor& t : hands) {
    edges.push_back(t.requires_grad() ? torch::autograd::impl::gradient_edge(t) : torch::autograd::Edge());
  }
  if (towers.defined()) {
    s.loss_terms.push_back(towers.detach());
    s.holds_loss = true;
    s.tower_losses[{v, k}] = towers;
  }
}

std::vector<torch::Tensor> StepExecutor::HandedGradients(int r, int v, int k) {
  Step& s = *step_;
  const auto& hands = s.output.at({v, k});
  std::vector<torch::Tensor> g(hands.size());
  auto add = [&](const std::vector<torch::Tensor>& parts) {
    for (size_t i = 0; i < hands.size(); ++i) g[i] = g[i].defined() ? g[i] + parts[i] : parts[i];
  };
  for (const StageEdge* e : s.edges.out[v]) {
    const int x = e->to;
    for (int c : Consumers(*e, k, s.exec.schedule.microbatches_of(x))) {
      if (s.exec.schedule.stage_rank[x] == r) {
        const MessageKey key{v, x, k, c, place_.MyPart(v)};
        auto m = s.mail.activations.find(key);
        if (m != s.mail.activations.end()) {  // else never read
          add(m->second.Gradient(key));
          s.mail.activations.erase(m);  // its consumers' backwards are done: nothing reads it again
        }
        continue;
      }
      // From every consumer process that sends to this one (as Receive pairs them),
      // on the rows its message carried.
      for (const Partner& p : Partners(Transfer{v, x, k, c, false}, /*sends=*/false, place_, s.packings)) {
        auto flat = s.mail.gradients.find(p.key);
        if (flat == s.mail.gradients.end()) {
          throw Error(
              fmt::format("runtime: stage {} microbatch {} runs its backward before the gradient from stage "
                          "{} microbatch {} arrived",
                          v, k, x, c));
        }
        const Carried& carried = s.packings.Carries(v, k, p.producer_part, x, p.consumer_part);
        add(carried.whole ? SplitLike(flat->second, hands) : SpreadRows(flat->second, hands, s.handed[v], carried));
        s.mail.gradients.erase(flat);  // read once (g keeps what it needs)
      }
    }
  }
  return g;
}

torch::Tensor StepExecutor::LossGradient(const torch::Tensor& loss) const {
  return scaler_ ? torch::full_like(loss, scaler_->scale()) : torch::ones_like(loss);
}

void StepExecutor::Backward(int r, const Action& a) {
  Step& s = *step_;
  const int v = a.stage, k = a.microbatch;
  // ZeRO-2 holds its whole gradients from its first backward to its
  // reduce-scatter only (sim/pipeline_costs.h backward_grad_bytes).
  if (zero_->Scattered(v) && !zero_->Fsdp(v) && !grad_buffers_->Bound(v)) grad_buffers_->Bind(v);
  // From the outputs' gradient edges, as torch::autograd::backward would
  // from the outputs themselves, whose values may be gone (ReadOutput).
  torch::autograd::edge_list roots;
  std::vector<torch::Tensor> grads;
  const auto& hands = s.output.at({v, k});
  if (s.loss_stage[v]) {
    if (hands[0].requires_grad()) {
      roots.push_back(torch::autograd::impl::gradient_edge(hands[0]));
      grads.push_back(LossGradient(hands[0]));
    }
  } else {
    const std::vector<torch::Tensor> g = HandedGradients(r, v, k);
    const auto& edges = s.output_edges.at({v, k});
    for (size_t i = 0; i < hands.size(); ++i) {
      if (hands[i].requires_grad() && g[i].defined()) {
        roots.push_back(edges[i]);
        grads.push_back(g[i]);
      }
    }
    if (auto t = s.tower_losses.find({v, k}); t != s.tower_losses.end()) {
      if (t->second.requires_grad()) {
        roots.push_back(torch::autograd::impl::gradient_edge(t->second));
        grads.push_back(LossGradient(t->second));
      }
      s.tower_losses.erase(t);
    }
  }
  if (!roots.empty()) {  // frozen layers fed by nothing trainable: no backward at all
    WeightGradDeferral& deferral = local_.stacks.at(v)->deferral();
    deferral.active = a.kind == ActionKind::kBackwardData;  // ZB: weight gradients wait for W
    torch::autograd::Engine::get_default_engine().execute(roots, grads, /*keep_graph=*/false,
                                                          /*create_graph=*/false, /*accumulate_grad=*/true, {});
    deferral.active = false;
    if (!deferral.pending.empty()) s.deferred[{v, k}] = std::move(deferral.pending);
    deferral.pending.clear();
  }
  s.output.erase({v, k});  // the graph is spent
  s.output_edges.erase({v, k});
  if (auto read = s.read.find({v, k}); read != s.read.end()) {
    for (Message* m : read->second) ++m->finished;
    s.read.erase(read);
  }
}

void StepExecutor::BackwardWeight(const Action& a) {
  if (auto d = step_->deferred.find({a.stage, a.microbatch}); d != step_->deferred.end()) {
    for (const auto& p : d->second) grad_buffers_->MarkReached(p.weight);
    ApplyWeightGradients(d->second);
    step_->deferred.erase(d);
  }
}

// The transfer a send or receive of stage v moves: activations from producer
// v to the consumer `peer` (default v + 1), or gradients from consumer v back
// to the producer `peer` (default v - 1). The action's microbatch is the
// producer's.
static Transfer TransferOf(const Action& a, const StepEdges& edges) {
  const bool act = a.payload == Payload::kActivation;
  const int v = a.stage;
  const int other = a.peer_stage >= 0 ? a.peer_stage : (act ? v + 1 : v - 1);
  Transfer t;
  t.activation = act;
  t.producer = act ? v : other;
  t.consumer = act ? other : v;
  t.mb = a.microbatch;
  t.consumer_mb = edges.ConsumerOf(t.producer, t.consumer, a.microbatch, a.peer_microbatch);
  return t;
}

// Activations to each process of the consumer's group that reads this one's
// part, each the rows of the samples that process's part of the consumer stage
// holds (StepPackings::Carries: on a broker edge between units of different
// data-parallel degrees, the consuming replica's share; elsewhere the whole
// output, one buffer for all); gradients to each process whose part this one
// read, of the rows it received.
void StepExecutor::Send(int r, const Action& a) {
  Step& s = *step_;
  const Transfer t = TransferOf(a, s.edges);
  std::vector<torch::Tensor> outputs;
  torch::Tensor whole;  // every row of them, flat, made once
  if (t.activation) outputs = s.ReadOutput({a.stage, a.microbatch});
  const int G = place_.group_gpus;
  std::set<MessageKey> answered;  // messages whose gradient goes back now: not read again
  for (const Partner& p : Partners(t, /*sends=*/true, place_, s.packings)) {
    torch::Tensor flat;
    if (t.activation) {
      const Carried& carried = s.packings.Carries(t.producer, t.mb, p.producer_part, t.consumer, p.consumer_part);
      if (carried.whole) {
        // One output goes as it is (a view: no copy beside it in flight).
        if (!whole.defined()) {
          whole = outputs.size() == 1 && outputs[0].is_contiguous() ? outputs[0].view({-1}) : Flatten(outputs, device_);
        }
        flat = whole;
      } else {
        flat = Flatten(CarriedRows(outputs, s.handed[t.producer], carried), device_);
      }
    } else {
      const MessageKey read_key{t.producer, t.consumer, t.mb, t.consumer_mb, p.producer_part};
      flat = Flatten(s.mail.activations.at(read_key).Gradient(read_key), device_);
      answered.insert(read_key);
    }
    const int peer = place_.GroupOf(a.peer) * G + p.shard;
    if (peer == place_.process) {  // a rank of this process: hand it over (a copy, not the output's values)
      s.mail.Local(t.activation)[p.key] = !outputs.empty() && flat.is_alias_of(outputs[0]) ? flat.clone() : flat;
      continue;
    }
    s.sends.Send(*groups_.world, r, a, peer, flat, Tag(a.payload, p.key, place_.stages(), s.microbatches, G));
  }
  for (const MessageKey& key : answered) s.mail.activations.erase(key);
}

void StepExecutor::Receive(int r, const Action& a) {
  Step& s = *step_;
  // The action's stage is the sender's; this process runs the peer stage.
  const Transfer t = TransferOf(a, s.edges);
  const int G = place_.group_gpus;
  for (const Partner& p : Partners(t, /*sends=*/false, place_, s.packings)) {
    const int peer = place_.GroupOf(a.peer) * G + p.shard;
    const Carried& carried = s.packings.Carries(t.producer, t.mb, p.producer_part, t.consumer, p.consumer_part);
    torch::Tensor flat;
    if (peer == place_.process) {
      auto& box = s.mail.Local(t.activation);
      auto found = box.find(p.key);
      if (found == box.end()) {
        throw Error(
            fmt::format("runtime: stage {} microbatch {}: a message between ranks {} and {} of this process "
                        "is received before it is sent",
                        a.stage, a.microbatch, a.peer, r));
      }
      flat = found->second;
      box.erase(found);
    } else {
      // Shapes follow from what the message carries of the producer microbatch's
      // packing on the producer's part (both ways: a gradient has its activation's).
      int64_t numel = 0;
      for (const auto& x : ShapesOf(t.producer, *carried.packing)) numel += x.numel();
      flat = torch::empty({numel}, torch::TensorOptions().device(device_).dtype(compute_dtype_));
      Recv(*groups_.world, flat, peer, Tag(a.payload, p.key, place_.stages(), s.microbatches, G), abort_);
      s.sends.Received(r, a, peer, abort_);
    }
    if (t.activation) {
      s.mail.activations[p.key] = MessageOf(t.producer, *carried.packing, flat);
    } else {
      s.mail.gradients[p.key] = flat;
    }
  }
}

// One bucket of the stage's gradients summed over its data-parallel group
// (each replica's loss is its share of the global batch's mean, so the sum is
// the global gradient); asynchronous, finished at the wait.
void StepExecutor::Collective(const Action& a) {
  Step& s = *step_;
  const int v = a.stage;
  const int group = a.group >= 0 ? a.group : s.exec.stages[v].dp_group;
  auto g = groups_.dp.find(group);
  if (g == groups_.dp.end()) return;
  if (fsdp_.count(v)) return;  // ZeRO-3 reduce-scattered each layer's gradients in its backward
  const auto& bucket = local_.buckets.at(v).at(a.bucket);
  if (bucket.empty()) return;
  // In place: the parameters' gradients are views of the buffer
  // (gradient_buffers.h). ZeRO-2 too, the all-reduce the simulator prices
  // (GradSyncTime_s): it keeps its slice of the sum at the wait and lets the
  // whole gradients go (an all-to-all of the slices, the reduce-scatter's
  // volume, needed a bucket-sized receive buffer beside each bucket in flight).
  s.reducing.emplace_back(WorkHandle(), std::vector<at::Tensor>{grad_buffers_->Flat(v, a.bucket)}, v, a.bucket);
  std::get<0>(s.reducing.back()) = AllReduceAsync(*g->second, std::get<1>(s.reducing.back()));
}

std::set<int> StepExecutor::StagesSummedWhole(const ExecutionPlan& exec) const {
  std::set<int> stages;
  for (int r : place_.local_ranks) {
    for (const Action& a : exec.schedule.ranks[r]) {
      if (a.kind != ActionKind::kCollective || fsdp_.count(a.stage) || zero_->Scattered(a.stage)) continue;
      const int group = a.group >= 0 ? a.group : exec.stages[a.stage].dp_group;
      if (groups_.dp.count(group)) stages.insert(a.stage);
    }
  }
  return stages;
}

// This rank's gradient all-reduces (another rank of this process may have its
// own in flight). Sends are not waited for here: a send completes only once
// its receiver posts the receive, which may come after this rank's wait in
// the receiver's order.
void StepExecutor::Wait(int r) {
  Step& s = *step_;
  const auto& stage_rank = s.exec.schedule.stage_rank;
  for (auto& [work, flat, stage, b] : s.reducing) {
    if (stage_rank[stage] != r) continue;
    Await(work, abort_);
    work = WorkHandle();  // the handle refers to the buffers too
    // Whole buckets: the parameters' gradients are views of flat[0], the sum.
    if (!zero_->Sharded(stage)) continue;
    const bool scattered = zero_->Scattered(stage);
    for (auto& sb : zero_->shards()) {  // only this replica's slice is stepped here
      if (sb.stage != stage || sb.bucket != b) continue;
      if (scattered) {  // ZeRO-2: the slice kept, the whole gradients let go below
        sb.master.mutable_grad() = flat[0].slice(0, sb.lo, sb.hi).clone();
      } else {  // ZeRO-1: a view of the buffer, as Megatron's distributed optimizer reads its shard
        sb.master.mutable_grad() = flat[0].slice(0, sb.lo, sb.hi);
      }
    }
    if (scattered) {  // freed on this thread, where the tensor-memory count sees it
      grad_buffers_->Release(stage, b);
      AwaitRelease(flat[0]);
    }
  }
  s.reducing.erase(std::remove_if(s.reducing.begin(), s.reducing.end(),
                                  [&](const auto& x) { return stage_rank[std::get<2>(x)] == r; }),
                   s.reducing.end());
}

void StepExecutor::ReportWeights(const ExecutionPlan& exec) {
  for (const auto& [v, stack] : local_.stacks) {  // every replica, in stage order
    if (zero_->Released(v)) zero_->GatherWeights(v);
  }
  for (const auto& [v, stack] : local_.stacks) {
    const bool first_copy = (exec.replicated ? place_.replica : exec.stages[v].replica) == 0;
    for (const auto& item : stack->named_parameters()) {
      const torch::Tensor& w = item.value();
      torch::Tensor stats = torch::tensor(
          {w.sum().item<double>(), w.pow(2).sum().item<double>(), w.abs().sum().item<double>()}, torch::kDouble);
      const std::string& name = item.key();
      if (name.size() >= 10 && name.compare(name.size() - 10, 10, "tied_table") == 0) continue;  // a copy
      if (stack->IsSharded(name)) AllReduceSum(*groups_.tp.at(place_.TpOf(v)), stats);
      if (first_copy && place_.shard == 0) {
        reports_.Now(report::Param{stats[0].item<double>(), stats[1].item<double>(), stats[2].item<double>()});
      }
    }
  }
}

void StepExecutor::SaveHfPart(const ExecutionPlan& exec, const std::string& path, torch::ScalarType dtype) {
  HfPart part;
  for (auto& [v, stack] : local_.stacks) {
    const bool first_copy = (exec.replicated ? place_.replica : exec.stages[v].replica) == 0;
    if (!first_copy || place_.MyPart(v) != 0) continue;
    const TensorParallel& tp = groups_.tensor_parallel.at(place_.TpOf(v));
    AppendHfPart(*stack, model_, tp, dtype, tp.rank == 0, part);
  }
  weights::WriteCheckpointPart(path, part.tensors, part.slices);
}

void StepExecutor::SaveCheckpointPart(const ExecutionPlan& exec, const std::string& path) {
  const auto share = optimizers_->CheckpointPart(
      [&](int v) { return (exec.replicated ? place_.replica : exec.stages[v].replica) == 0 && place_.MyPart(v) == 0; });
  weights::WriteSafetensors(path, share.tensors, share.metadata);
}

void StepExecutor::Barrier() {
  torch::Tensor one = torch::ones({1}, torch::TensorOptions().device(device_));
  AllReduceSum(*groups_.world, one, abort_);
  AwaitRelease(one);
}

void StepExecutor::RestoreCheckpoint(const weights::RunCheckpointReader& reader) {
  optimizers_->Restore(reader);
  const weights::RunCheckpointManifest& m = reader.manifest();
  if (scaler_ && m.has_loss_scale) scaler_->Restore(m.loss_scale, m.growth_tracker, m.hysteresis_tracker);
}

}  // namespace loom::runtime
