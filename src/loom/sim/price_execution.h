// Prices an ExecutionPlan under the cluster's CostModel: for every replica, the
// time and memory of every (stage, microbatch) from the tokens its sample
// pieces put through the stage's layers, every rank's resident model state,
// every stage's gradient-sync time. The one place stage prices are made:
// simulation (sim/plan_run.h) and strategies that predict per-sample stage
// times (MMScale's reordering) both call it. Pure function of its inputs.
#pragma once

#include <array>
#include <map>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "loom/cost/frozen.h"
#include "loom/cost/layer_pricing.h"
#include "loom/cost/token_stats.h"
#include "loom/data/sample.h"
#include "loom/plan/execution_plan.h"
#include "loom/sim/pipeline_costs.h"
#include "loom/spec/cluster.h"
#include "loom/spec/model.h"

namespace loom {

struct ExecutionCosts {
  // One entry per distinct replica: a `replicated` plan's replicas whose costs
  // equal an earlier one's only raise its weight; otherwise one entry.
  std::vector<PipelineCosts> replicas;
  std::vector<int> replica_weight;  // data-parallel replicas each entry stands for
  std::vector<int> entry_of;        // per data-parallel replica priced, its entry in `replicas`
  double model_flops = 0;           // useful FLOPs of the iteration, every GPU
  double tokens = 0;                // the busiest module's tokens this iteration
};

// Per (stage, microbatch) of replica 0, each layer's price under the three
// recomputation choices, indexed by Recompute. For PipeWeaver's layer tuning.
struct LayerOptions {
  std::vector<std::vector<std::vector<std::array<LayerTimes, 3>>>> at;  // [stage][mb][layer in stage][choice]
};

// What PriceExecution computes that depends only on (model, cluster, batch)
// and a stage's parallel shape, kept across calls: the token statistics of a
// microbatch's sample pieces and the cost of a stage on them. A search pricing
// thousands of candidate plans of one batch then prices each distinct (stage,
// microbatch) once (candidates differing only in DP, microbatch order or
// schedule share them all). A stage is known by its parallel shape and the
// classes of its layers (equal layers with equal backward needs), not by where
// it cuts its modules, so differently cut pipelines share prices too. Every
// cached value is what PriceExecution computes without the memo, bit for bit.
// Stages with per-layer recomputation are priced afresh each time. Bound to the (model, cluster,
// batch) it is first used with: PriceExecution throws loom::Error on another.
// Its memory is bounded: past kMaxEntries stage prices (about 100 MB) it
// starts over. Not thread-safe.
class PricingMemo {
 public:
  int64_t stage_hits() const { return stage_hits_; }
  int64_t stage_misses() const { return stage_misses_; }
  static constexpr size_t kMaxEntries = size_t{1} << 20;

 private:
  friend ExecutionCosts PriceExecution(const ExecutionPlan&, const Model&, const Cluster&, const Batch&, LayerOptions*,
                                       PricingMemo*, int);
  friend int HeaviestReplica(const ExecutionPlan&, const Model&, const Batch&, PricingMemo*);
  // Binds the memo to (model, cluster, batch) or checks it is bound to them;
  // starts over when full.
  void Bind(const Model& model, const Cluster* cluster, const Batch& batch);
  // The index in tokens_ of a microbatch's CountModuleTokens.
  int TokenId(const Model& model, const Batch& batch, std::span<const SamplePiece> pieces);
  // CpImbalanceOfModule of one microbatch (by token id), memoized.
  double ModuleImbalance(const Model& model, const Batch& batch, int sm_count, int token_id,
                         std::span<const SamplePiece> pieces, int module, const ExecStage& stage);
  using ImbalanceKey = std::array<int, 5>;  // token id, module, cp, cp_split, tp
  struct Priced {
    StageCost cost;
    double flops = 0;
  };
  const Model* model_ = nullptr;
  const Cluster* cluster_ = nullptr;
  const Batch* batch_ = nullptr;
  std::vector<std::vector<BackwardNeeds>> needs_;  // ComputeBackwardNeeds of the model
  std::vector<std::vector<int>> classes_;          // per module and layer: its class (equal layers, equal needs)
  std::map<std::vector<std::pair<int, int>>, int> token_ids_;  // microbatch pieces -> index into tokens_
  std::vector<std::vector<TokenStats>> tokens_;
  std::map<std::string, int> stage_ids_;         // a stage's pricing signature -> id
  std::unordered_map<uint64_t, Priced> stages_;  // (stage id, token id) -> price
  std::map<ImbalanceKey, double> imbalance_;     // -> CpImbalanceOfModule
  int64_t stage_hits_ = 0, stage_misses_ = 0;
};

// REQUIRES: ValidateExecution(exec) holds and `batch` is the batch it was compiled for.
// `memo`, when not null, caches pure sub-results across calls (PricingMemo).
// `only_replica` >= 0 prices that replica of exec.replicas alone (the costs
// then hold one replica, and model_flops and tokens count only it): what a
// search's lower bound needs (sim/iteration_bound.h).
ExecutionCosts PriceExecution(const ExecutionPlan& exec, const Model& model, const Cluster& cluster, const Batch& batch,
                              LayerOptions* options = nullptr, PricingMemo* memo = nullptr, int only_replica = -1);

// The replica of `exec` whose microbatches carry the most tokens (summed over
// modules) of `batch`: the one a lower bound from one replica is tightest on.
int HeaviestReplica(const ExecutionPlan& exec, const Model& model, const Batch& batch, PricingMemo* memo = nullptr);

// Under ZeRO-3, an embedding whose tied head runs on the same stage stays
// gathered through each backward (runtime/fsdp_layers.h: both the head's
// backward and its own read it), its full gradient building up from the
// head's down: its unit's bytes (weights in the compute dtype, fp32
// gradient) on top of the whole backward's other working sets, not at the
// embedding's turn alone. Returns them (0 for any other stage) and takes
// them out of the embedding's entry of `priced` (the stage's layers in
// forward order, as PriceLayer priced them).
double PinnedEmbeddingBytes(const Model& model, const ExecStage& st, Precision precision,
                            std::vector<LayerTimes>* priced);

// One stage on one microbatch whose per-module tokens are `tokens`
// (CountModuleTokens), with per-layer recomputation `layer_recompute` (empty:
// the stage's). `flops`, when not null, receives the useful FLOPs of one GPU.
StageCost PriceStage(const Model& model, const Cluster& cluster, const ExecStage& stage,
                     const std::vector<TokenStats>& tokens, const std::vector<Recompute>& layer_recompute,
                     const std::vector<std::vector<BackwardNeeds>>& needs, Precision precision, double* flops = nullptr,
                     std::vector<std::array<LayerTimes, 3>>* options = nullptr,
                     const std::vector<double>* cp_imbalance = nullptr);

// Per module of the model, the busiest CP rank's share of `stage`'s attention
// pairs over 1/cp (CpImbalance) on microbatch `pieces` of `batch`, each
// sample's sequence split by the stage's cp_split; 1 where ideal or cp 1.
// The balanced split (Cornstarch's) also gets its intra-GPU sub-block split
// on `sm_count` SMs (SubBlockFactor; 0: not priced).
std::vector<double> CpImbalanceOf(const Model& model, const ExecStage& stage, const Batch& batch, int sm_count,
                                  std::span<const SamplePiece> pieces);

// CpImbalanceOf for one module at context parallelism `cp` split by `split`,
// its attention heads over `tp` sharing the kernel's SMs.
double CpImbalanceOfModule(const Model& model, int module, int cp, CpSplit split, int tp, const Batch& batch,
                           int sm_count, std::span<const SamplePiece> pieces);

// Parameters per GPU of one stage: trainable, frozen, and the trainable ones
// replicated over the TP group (modules whose heads do not divide).
struct StageParams {
  double trainable = 0, frozen = 0, replicated = 0;
};
StageParams StageParamsOf(const Model& model, const ExecStage& stage);

// Data-parallel gradient sync of one stage's trainable weights over
// its unit's replicas (16-bit gradients under mixed precision, else 32-bit).
double GradSyncTime_s(const StageParams& params, const ExecStage& stage, Precision precision, const Cluster& cluster);
// The same for a stage of heterogeneous templates: one all-reduce per layer
// segment it holds (ExecStage::segment_groups) over the segment's holders.
double SegmentSyncTime_s(const Model& model, const ExecutionPlan& exec, const ExecStage& stage, const Cluster& cluster);

}  // namespace loom
