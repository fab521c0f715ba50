// An ExecutionPlan says exactly who does what, in which order, with whom, for
// one iteration of a Plan on one batch (DESIGN.md: Plan says what, the
// ExecutionPlan says how; DuckDB's logical vs physical plan). It is what the
// simulator prices and times and what the runtime executes; nothing else
// reaches either. Produced by CompilePlan (plan/compile_plan.h), one compiler
// file per plan shape. Plain value; no costs inside (sim/price_execution.h
// prices it under a CostModel).
//
// Invariants (CompilePlan establishes them, ValidateExecution checks them):
//   - `schedule` holds every rank's ordered actions over the stage DAG
//     `schedule.edges`: forward, backward or its data/weight halves, send/recv
//     with peer rank and stage, then per stage kGradientBuckets gradient
//     collectives naming their group (Action::group), a wait, and the
//     optimizer step. Bytes and seconds are not in it: pricing adds them;
//   - stages.size() == schedule.num_stages(), ranks.size() == schedule.num_ranks;
//   - replicas[r][s].size() == schedule.microbatches_of(s) for every replica r;
//   - every stage's `dp_group`, and every collective's group, indexes `groups`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/cost/layer_work.h"
#include "loom/pipeline/schedule.h"
#include "loom/plan/piece_list.h"
#include "loom/plan/plan.h"
#include "loom/spec/precision.h"

namespace loom {

// The contents of one (stage, microbatch): its sample pieces and, per layer of
// the stage in order, the recomputation it runs with (empty: the stage's).
struct MicrobatchWork {
  PieceList pieces;
  std::vector<Recompute> layer_recompute;
  bool operator==(const MicrobatchWork&) const = default;
};

// A virtual stage: the layers it runs and how. Its rank's `gpus` GPUs (one
// group, or several for an Oobleck rank spanning groups) run it: `tp` of them
// split each layer (Megatron tensor parallelism), `cp` split sequences by
// context, and the remaining `seq_share` members split the microbatch's
// sequences between them (a module whose heads do not divide
// by tp is replicated over the TP group). `dp` replicas of its unit hold the
// same layers: model state is sharded and gradients synced over them.
struct ExecStage {
  int unit = 0;      // index into the plan's units
  int pipeline = 0;  // template of the unit
  int replica = 0;   // replica of the unit (across templates)
  std::vector<LayerRange> layers;
  int tp = 1, cp = 1, seq_share = 1;
  CpSplit cp_split = CpSplit::kIdeal;  // its unit's
  int dp = 1;
  int gpus = 1;  // GPUs that run it: its rank's groups x group_gpus
  int zero_stage = 1;
  double sm_fraction = 1;                  // share of each GPU's SMs (Mosaic); cost/sm_sharing.h prices it
  int phase = 0;                           // its unit's temporal phase (stages of one phase sharing GPUs run at once)
  Recompute recompute = Recompute::kNone;  // default of its layers
  bool sequence_parallel = true;           // Megatron sequence parallelism over its TP group
  int dp_group = -1;                       // index into ExecutionPlan::groups: the replicas its gradients sync with
  // Heterogeneous templates (Oobleck): the kLayerSegment groups its layers
  // fall in; its gradients sync over these, layer segment by segment, not
  // over dp_group (which holds only stages cut exactly alike).
  std::vector<int> segment_groups;
  std::string label;  // "vision[0:16]+projector[0:1]"
  int num_layers() const;
  bool operator==(const ExecStage&) const = default;
};

// A schedule rank: one GPU group running one replica's pipeline rank of a unit.
struct ExecRank {
  int unit = 0, pipeline = 0, replica = 0, pp_rank = 0;
  int group = 0;       // first GPU group: GPUs from group * group_gpus
  int num_groups = 1;  // groups it spans
  double sm_fraction = 1;
  std::string name;  // "llm p0 r1 pp2"
  bool operator==(const ExecRank&) const = default;
};

// A communication group: the GPU groups a collective runs over.
// Append-only.
//   kDataParallel: a stage's data-parallel replicas;
//   kLayerSegment (Oobleck Fig. 2.9): consecutive layers of a unit whose
//     templates cut their stages differently, held by exactly these GPU
//     groups; their gradients are summed over them at the step.
enum class GroupKind : uint8_t { kDataParallel = 0, kLayerSegment = 1 };
struct CommGroup {
  int id = 0;
  GroupKind kind = GroupKind::kDataParallel;
  std::vector<int> gpu_groups;     // members, ascending
  std::vector<LayerRange> layers;  // kLayerSegment: its layers, in model order
  bool operator==(const CommGroup&) const = default;
};

struct ExecutionPlan {
  std::string strategy;
  Schedule schedule;
  std::vector<ExecStage> stages;
  std::vector<ExecRank> ranks;
  std::vector<CommGroup> groups;
  // Microbatch contents, [replica][stage][microbatch]. When `replicated`, the
  // schedule's ranks are one replica's pipeline and every data-parallel replica
  // runs it on its own samples (one entry each); otherwise the schedule holds
  // every replica's ranks and there is one entry.
  std::vector<std::vector<std::vector<MicrobatchWork>>> replicas;
  bool replicated = false;
  int group_gpus = 1;
  int num_groups = 0;                      // GPU groups of the cluster
  Precision precision = Precision::kBf16;  // the workload's
  int64_t samples = 0;                     // samples trained (deferred ones excluded)
  bool operator==(const ExecutionPlan&) const = default;
};

// Throws loom::Error naming the first broken invariant.
void ValidateExecution(const ExecutionPlan& exec);

}  // namespace loom
