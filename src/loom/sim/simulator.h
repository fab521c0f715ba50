// The pipeline simulator (PipeWeaver's SEMU, notes §1.5, at the granularity
// of pipeline actions). Each rank has a compute stream, a communication
// stream (sends) and a gradient-sync stream that overlap; each runs its
// actions in list order; an action starts
// when its stream is free and its dependencies are met
// (pipeline/dependency_graph.h), so one pass in the topological order the
// validation proved times every action as an event queue would. A send
// occupies the sender's communication stream for latency + bytes / bandwidth;
// the receive completes with it.
//
// Spatial reuse: one simulated rank stands for its whole TP group, and one
// replica for every data-parallel replica that gets the same batch; replicas
// that get different batches are simulated separately and joined at the
// gradient sync, bucket by bucket (start = the latest replica's ready time).
//
// Temporal reuse: after SetCost or SwapMicrobatches, Resimulate() recomputes
// only the actions whose times can change (walking the dependency graph from
// the changed ones, in topological order, stopping where times stay equal);
// the result equals a full simulation.
//
// Memory: with SimOptions::record_timelines off, replicas are timed one at a
// time into one scratch timeline and summarized at once; only the join set's
// times are kept per replica. Not thread-safe.
#pragma once

#include <vector>

#include "loom/pipeline/dependency_graph.h"
#include "loom/pipeline/schedule.h"
#include "loom/sim/pipeline_costs.h"
#include "loom/sim/sim_result.h"

namespace loom {

struct SimOptions {
  bool overlap_grad_sync = true;  // buckets sync during the last backward (Megatron overlap_grad_reduce)
  int grad_buckets = 4;           // gradient buckets per virtual stage, when the schedule has no collectives yet
  // true: keep every replica's action times (start_s, end_s, Resimulate),
  // every action's interval and every rank's memory curve, for traces and
  // reports. false: summaries only (iteration time, busy time and peak memory
  // per rank and per memory group), holding one replica's times at a time:
  // what searches and unrecorded batches need, in a fraction of the memory.
  bool record_timelines = true;
  // Ranks whose memory adds up (they share GPUs: a plan's co-located or
  // time-sharing stages): SimResult::group_peak_mem_bytes holds the peak of
  // each group's summed curve. Empty: no groups.
  std::vector<std::vector<int>> memory_groups;
  bool optimizer_step = true;  // end each rank with its optimizer step (PipelineCosts::optimizer_s)
  // Gradient collectives on a stream of their own, beside the sends (Megatron's
  // DP communicator); false: queued behind every send of the rank, so a stage
  // that sends an input gradient after its last backward could not overlap its
  // buckets with that backward (one unit per module: Mosaic, DistMM, Spindle).
  bool sync_stream = true;
  void Validate() const;       // throws loom::Error naming the field
};

class Simulator {
 public:
  // Validates the schedule (throws loom::Error on a bad or deadlocking one) and
  // simulates every replica. REQUIRES: each replica's costs match the schedule's
  // stages, microbatches and ranks.
  Simulator(Schedule schedule, std::vector<PipelineCosts> replicas, SimOptions options = {});

  const SimResult& result();  // computes memory (curves, with timelines) lazily after a run
  double iteration_time_s() const { return iteration_time_s_; }

  // Simulates the same schedule with other costs, from scratch (what a
  // batch scheduler comparing orders of one batch needs: the schedule, its
  // dependency graph and its validation are kept). Throws loom::Error when
  // the costs do not match the schedule's stages, microbatches and ranks.
  void Rerun(std::vector<PipelineCosts> replicas);
  // Changes the cost of (stage, microbatch) in `replica`; call Resimulate() after.
  void SetCost(int replica, int stage, int mb, const StageCost& cost);
  // Swaps microbatches a and b of `replica` at every stage (a data reordering).
  void SwapMicrobatches(int replica, int a, int b);
  // Re-times only what the changes since the last run can affect.
  void Resimulate();
  // Re-times everything from scratch (the reference for Resimulate()).
  void SimulateFromScratch();

  const Schedule& schedule() const { return schedule_; }

  // Hands over the schedule (with the gradient-sync and optimizer actions it
  // added), the costs and the result (memory computed), without copying them:
  // a 16k-GPU plan's are hundreds of MB. The simulator is spent after.
  struct Parts {
    Schedule schedule;
    std::vector<PipelineCosts> replicas;
    SimResult result;
  };
  Parts Release() &&;
  const DependencyGraph& graph() const { return graph_; }
  // Start and end of action `index` of pipeline rank `rank` in `replica`.
  double start_s(int replica, int rank, int index) const;
  double end_s(int replica, int rank, int index) const;

 private:
  double Duration(int replica, int id) const;
  // Max over the stream predecessor and the dependencies of `id`, in one replica's times.
  double ReadyTime(const double* start, const double* end, int id) const;
  double JoinReadyTime(int replica, int id) const;  // the same for an action of the join set
  // Times one replica's actions outside the join set into start/end, then CollectReplica.
  void RunReplica(int replica, double* start, double* end);
  // Keeps what the join and the iteration time read of one replica's times.
  void CollectReplica(int replica, const double* start, const double* end);
  void JoinGradientSync();  // the join set, across replicas
  void Summarize();         // iteration time
  // Busy time, memory curve (when `curve` is not null) and peak of rank r in one replica.
  double RankMemory(int replica, int r, const double* start, const double* end, double* busy_s,
                    std::vector<MemoryPoint>* curve);
  void StartSummary();
  void SummarizeReplica(int replica, const double* start, const double* end,
                        std::vector<std::vector<MemoryPoint>>* curves);
  void FinishSummary();
  void ComputeMemory();  // every replica, from the kept timelines
  void RequireTimelines(const char* what) const;
  void CheckCosts() const;  // the replicas' costs match the schedule
  void AllocateTimes();     // per-replica state, sized for replicas_

  // Immutable after construction.
  Schedule schedule_;
  DependencyGraph graph_;
  SimOptions options_;
  std::vector<int> topo_order_;  // a topological order of action ids
  std::vector<int> topo_index_;  // position in topo_order_ (with timelines: Resimulate)
  // Stream successor and data users of each id: users_[users_begin_[id]] on.
  std::vector<int> users_begin_, users_;
  // What Duration reads of each action, flat (the hot loop of every run).
  struct Op {
    ActionKind kind;
    int cost_stage;  // compute, collective: its stage; send: the stage whose output it carries
    int microbatch;
    int rank;
  };
  std::vector<Op> ops_;
  std::vector<int> collective_ids_, wait_ids_, optimizer_ids_;
  // The collectives as all-reduces: one list of ids per all-reduce (a bucket
  // of one sync_set, else one collective), each after those its members
  // follow on their streams.
  std::vector<std::vector<int>> all_reduces_;
  std::vector<int> buckets_;                     // per stage: its gradient collectives (on its rank)
  std::vector<double> send_share_;               // per action: share of the producer's output a send carries
  std::vector<std::vector<int>> actions_of_mb_;  // ids of every action of each microbatch (with timelines)
  // The join set: gradient collectives, waits and optimizer steps, timed
  // across replicas by JoinGradientSync; no other action depends on one
  // (the constructor checks), so a replica's pass times everything else.
  std::vector<int> join_ids_;       // in id order
  std::vector<int> join_index_;     // per id: its index in join_ids_, -1 outside the join set
  std::vector<int> replica_order_;  // topo_order_ without the join set
  std::vector<int> last_action_;    // per rank: id of its last listed action, -1 if none
  std::vector<char> shares_gpus_;   // per rank: in a memory group with other ranks

  // Mutated by runs.
  std::vector<PipelineCosts> replicas_;
  // [replica][id]; one replica's scratch without record_timelines.
  std::vector<std::vector<double>> start_, end_;
  // Per replica: each join action's ready time from outside the join set,
  // its times, each rank's last action's end (outside the join set) and each
  // stage's last backward's end.
  std::vector<std::vector<double>> local_ready_, join_start_, join_end_, last_end_, backward_end_;
  std::vector<std::pair<double, double>> deltas_;        // RankMemory scratch: (time, bytes)
  std::vector<std::vector<MemoryPoint>> shared_curves_;  // SummarizeReplica scratch: ranks sharing GPUs
  std::vector<std::vector<int>> dirty_;                  // [replica] ids whose cost changed
  std::vector<char> forced_, queued_;                    // Resimulate() scratch, all zero between calls
  double iteration_time_s_ = 0;
  SimResult result_;
  bool memory_stale_ = true;
};

// Convenience: one replica, full simulation.
SimResult Simulate(const Schedule& schedule, const PipelineCosts& costs, const SimOptions& options = {});

}  // namespace loom
