// The event-driven pipeline simulator (PipeWeaver's SEMU, notes §1.5, at the
// granularity of pipeline actions). Each rank has a compute stream and a
// communication stream that overlap; each runs its actions in list order; an
// action starts when its stream is free and its dependencies are met
// (pipeline/dependency_graph.h). A send occupies the sender's communication
// stream for latency + bytes / bandwidth; the receive completes with it.
//
// Spatial reuse: one simulated rank stands for its whole TP group, and one
// replica for every data-parallel replica that gets the same batch; replicas
// that get different batches are simulated separately and joined at the
// gradient sync, bucket by bucket (start = the latest replica's ready time).
//
// Temporal reuse: after SetCost or SwapMicrobatches, Resimulate() recomputes
// only the actions whose times can change (walking the dependency graph from
// the changed ones, in topological order, stopping where times stay equal);
// the result equals a full simulation. Not thread-safe.
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
  bool record_intervals = true;   // keep every action's interval (for traces and reports)
  bool optimizer_step = true;     // end each rank with its optimizer step (PipelineCosts::optimizer_s)
  void Validate() const;          // throws loom::Error naming the field
};

class Simulator {
 public:
  // Validates the schedule (throws loom::Error on a bad or deadlocking one) and
  // simulates every replica. REQUIRES: each replica's costs match the schedule's
  // stages, microbatches and ranks.
  Simulator(Schedule schedule, std::vector<PipelineCosts> replicas, SimOptions options = {});

  const SimResult& result();  // computes memory curves lazily after a Resimulate()
  double iteration_time_s() const { return iteration_time_s_; }

  // Changes the cost of (stage, microbatch) in `replica`; call Resimulate() after.
  void SetCost(int replica, int stage, int mb, const StageCost& cost);
  // Swaps microbatches a and b of `replica` at every stage (a data reordering).
  void SwapMicrobatches(int replica, int a, int b);
  // Re-times only what the changes since the last run can affect.
  void Resimulate();
  // Re-times everything from scratch (the reference for Resimulate()).
  void SimulateFromScratch();

  const Schedule& schedule() const { return schedule_; }
  const DependencyGraph& graph() const { return graph_; }
  // Start and end of action `index` of pipeline rank `rank` in `replica`.
  double start_s(int replica, int rank, int index) const;
  double end_s(int replica, int rank, int index) const;

 private:
  double Duration(int replica, int id) const;
  double ReadyTime(int replica, int id) const;  // max over stream predecessor and dependencies
  void RunReplica(int replica);                 // event-driven pass over one replica
  void JoinGradientSync();                      // collectives and waits across replicas
  void Summarize();                             // iteration time and busy times
  void ComputeMemory();

  // Immutable after construction.
  Schedule schedule_;
  DependencyGraph graph_;
  SimOptions options_;
  std::vector<int> topo_order_;                // a topological order of action ids
  std::vector<int> topo_index_;
  std::vector<std::vector<int>> users_;        // stream successor and data users of each id
  std::vector<int> collective_ids_, wait_ids_, optimizer_ids_;
  // The collectives as all-reduces: one list of ids per all-reduce (a bucket
  // of one sync_set, else one collective), each after those its members
  // follow on their streams.
  std::vector<std::vector<int>> all_reduces_;
  std::vector<int> buckets_;                   // per stage: its gradient collectives (on its rank)
  std::vector<double> send_share_;             // per action: share of the producer's output a send carries
  std::vector<std::vector<int>> actions_of_mb_;  // ids of every action of each microbatch

  // Mutated by runs.
  std::vector<PipelineCosts> replicas_;
  std::vector<std::vector<double>> start_, end_;  // [replica][id]
  std::vector<std::vector<int>> dirty_;           // [replica] ids whose cost changed
  std::vector<char> forced_, queued_;             // Resimulate() scratch, all zero between calls
  double iteration_time_s_ = 0;
  SimResult result_;
  bool memory_stale_ = true;
};

// Convenience: one replica, full simulation.
SimResult Simulate(const Schedule& schedule, const PipelineCosts& costs, const SimOptions& options = {});

}  // namespace loom
