// PipeWeaver's pipeline-stage interleaving (§6.2): a dual-queue list
// scheduler. Each rank has a forward and a backward queue in ranking order;
// the rank whose next stage can start earliest goes next; when both of its
// queue heads could start without a bubble it alternates forward and backward
// (Megatron's 1F1B), otherwise it takes the one that can start first. The
// forward queue pauses while the rank's activations would exceed its memory.
//
// Choices where the paper is silent (docs/strategies.md, "pipeweaver"):
//  - only queue heads are candidates (strict ranking order, so the order of
//    two stages of one type is the same on every rank: ordering consistency);
//  - the ranking orders forward and backward segment groups separately
//    (StageFlow::event), each consistent with its microbatch's dependencies;
//    inside a group the forward queue goes by stage, then sub-microbatch
//    (chunk-major, as Megatron's interleaving), the backward queue by stage
//    in reverse. Both orders are topological, so the queues cannot deadlock;
//  - the next rank is the one whose head can start earliest (max of its
//    stream's free time and the head's ready time); ties go to the lower rank;
//  - ties between the two heads go to the backward (it frees memory);
//  - when every rank is blocked only by memory, the earliest paused forward
//    runs anyway and the interleaving is marked as not fitting.
// The timeline is the simulator's on compute (a stage starts when its rank is
// free and its inputs arrived, transfers taking the point-to-point time); it
// omits send-stream queueing and the gradient sync, which the full simulation
// of the chosen order adds.
#pragma once

#include <vector>

#include "loom/strategies/pipeweaver/stage_flow.h"

namespace loom {

struct Interleaving {
  std::vector<std::vector<int>> order;  // per rank, flow stages in execution order
  std::vector<double> start_s, end_s;   // per flow stage
  double makespan_s = 0;
  std::vector<double> peak_bytes;  // per rank, activations held at the worst point
  bool fits = true;                // false: a forward ran over the rank's capacity
  // Busiest rank's work / makespan (the score of PipeWeaver Alg. 1: the share
  // of the critical rank's time that is not bubble).
  double score = 0;
};

struct InterleaveOptions {
  bool track_memory = true;  // pause the forward queue at capacity
  bool alternate = true;     // 1F1B alternation when both heads are ready
};

// Reusable per flow: queues are pre-sorted inside each segment group, so one
// run costs O(stages x ranks). Not thread-safe (scratch state); one per worker.
class Interleaver {
 public:
  explicit Interleaver(const StageFlow& flow);
  // `position[e]`: place of event e (StageFlow::event) in the ranking (0 runs
  // first). REQUIRES: a permutation in which each microbatch's events come in
  // their step order.
  Interleaving Run(const std::vector<int>& position, const InterleaveOptions& options = {});
  const StageFlow& flow() const { return flow_; }

 private:
  const StageFlow& flow_;
  std::vector<std::vector<std::vector<int>>> fw_, bw_;  // [group][rank] -> stages, pre-sorted
  std::vector<std::vector<std::pair<int, double>>> succ_;
  double lower_bound_s_ = 0;
};

// The default ranking: microbatch by microbatch, forwards by module and
// backwards in reverse (Megatron's order).
std::vector<int> DefaultRanking(const StageFlow& flow);

}  // namespace loom
