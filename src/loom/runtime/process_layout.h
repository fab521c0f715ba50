// Where the runtime runs an ExecutionPlan: one worker process per GPU, the GPUs
// of GPU group g being processes g * group_gpus .. (g + 1) * group_gpus - 1 (a
// group's GPUs are the tensor-parallel shards of whatever runs there). A
// process runs every schedule rank placed on its group: one for Megatron-style
// plans (each data-parallel replica's copy of the pipeline on its own groups),
// several where units take turns on shared groups (DistMM's and Optimus'
// temporal phases). Torch-free, so the launcher and tests use it without
// libtorch.
#pragma once

#include <utility>
#include <vector>

#include "loom/plan/execution_plan.h"
#include "loom/runtime/packing.h"
#include "loom/spec/model.h"

namespace loom::runtime {

// One running copy of a schedule rank: `replica` counts the data-parallel
// copies of a `replicated` plan's pipeline (0 otherwise, where the schedule
// holds every replica's ranks itself).
struct RankCopy {
  int rank = 0;
  int replica = 0;
  bool operator==(const RankCopy&) const = default;
};

struct ProcessLayout {
  int group_gpus = 1;
  int processes = 0;                            // GPU groups used x group_gpus
  std::vector<std::vector<RankCopy>> of_group;  // per GPU group: the copies it runs, ascending rank
  std::vector<int> instance_group;              // per instance: its GPU group
  // Instance number of a copy: replica * ranks + rank (the simulator's rank of a replicated plan's copy).
  int ranks = 0;
  int Instance(const RankCopy& c) const { return c.replica * ranks + c.rank; }
  int GroupOf(const RankCopy& c) const { return instance_group[Instance(c)]; }
  int instances() const { return static_cast<int>(instance_group.size()); }
};

// Where one worker process sits in an ExecutionPlan: its GPU group and its
// shard in it, the schedule ranks it runs, and per stage the parallel shape
// that says which processes of two groups exchange what. Per stage, its
// group's G processes are tp shards (fastest, Megatron's order) of G / tp
// parts: CP ranks, or sequence shares (the microbatch's samples split between
// them). Fixed for a run: a later step's batch places stages as step 0's did.
struct ProcessPlace {
  ProcessLayout layout;
  int process = 0;               // this process's index in the run (c10d's rank in the world group)
  int group_gpus = 1;            // G
  int group = 0;                 // its GPU group
  int shard = 0;                 // its index in the group
  int replica = 0;               // the data-parallel copy it runs (a replicated plan; else 0)
  int content = 0;               // index into ExecutionPlan::replicas (replica for a replicated plan, else 0)
  std::vector<int> local_ranks;  // the schedule ranks it runs
  // Per stage: its schedule rank, TP degree and sequence shares.
  std::vector<int> stage_rank, tp, seq_share;
  // This group's context parallelism (one per group, CompileForRuntime checks):
  // its CP ranks are the parts of its stages' TP shards.
  int cp = 1, cp_tp = 1, cp_rank = 0;

  int stages() const { return static_cast<int>(stage_rank.size()); }
  int TpOf(int v) const { return tp[v]; }
  int TpRankOf(int v, int s) const { return s % tp[v]; }
  int PartOf(int v, int s) const { return s / tp[v]; }
  int MyTpRank(int v) const { return TpRankOf(v, shard); }
  int MyPart(int v) const { return PartOf(v, shard); }
  bool Shares(int v) const { return seq_share[v] > 1; }
  bool IsLocal(int v) const;
  // The GPU group running schedule rank `r` (this process's replica of it).
  int GroupOf(int r) const { return layout.GroupOf({r, replica}); }
  // The process of rank `r`'s group with this process's shard.
  int ProcessOf(int r) const { return GroupOf(r) * group_gpus + shard; }
  // Trace instance of rank `r`'s copy run here.
  int Instance(int r) const { return layout.Instance({r, replica}); }
};

// Where process `process` (its index in the run) sits in `exec`.
ProcessPlace PlaceProcess(const ExecutionPlan& exec, int process);

// Throws loom::Error when a rank spans several GPU groups (Oobleck's stages
// of mixed widths are not run yet; heterogeneous templates of one width are).
ProcessLayout LayoutProcesses(const ExecutionPlan& exec);

// The order one process walks the actions of its schedule ranks `local`
// (pairs of rank and action index): each rank's list in order, merged along
// one topological order of the whole schedule's dependency graph (the
// schedule's dependencies, list order, barriers between phases, and every
// gradient collective of a group before any wait of a rank in that group).
// Every process taking its share of one global topological order cannot
// deadlock: the earliest action not yet run always has everything it waits
// for done or issued.
std::vector<std::pair<int, int>> ProcessOrder(const ExecutionPlan& exec, const std::vector<int>& local);

// What each stage hands on to the stages after it: per stage, the modules
// whose tensors it sends (ascending, with their widths): a module it did not
// finish, and every module output it holds (its own or received) that a stage
// reachable from it still reads. The stage holding the loss hands on nothing.
std::vector<std::vector<BoundaryTensor>> StageOutputs(const Model& model, const ExecutionPlan& exec);

// The stage holding the loss module's last layer, per stage: true or false.
std::vector<bool> LossStages(const Model& model, const ExecutionPlan& exec);

// Per stage, the modules other than the last that end in it and that no module
// reads: towers trained beside the loss module rather than into it (CLIP's
// image tower beside its text tower, ImageBind's). Each adds a surrogate loss
// where it ends (torch_model.h TowerLoss), so that its backward runs, as the
// simulator prices it; the runtime has no contrastive loss across towers.
std::vector<std::vector<int>> TowerEnds(const Model& model, const ExecutionPlan& exec);

}  // namespace loom::runtime
