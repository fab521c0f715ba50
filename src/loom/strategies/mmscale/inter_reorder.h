// MMScale inter-microbatch reordering (paper §5.2, Alg. 3): orders the
// microbatches of one pipeline so that the idle windows 1F1B leaves on the
// first stage ("pipeline intervals") are filled by forward passes of matching
// length, the smallest microbatch first (to start every stage early) and the
// smallest p - 1 last (the last intervals are never filled).
//
// Erratum fixed: Alg. 3's loop runs i = 1 .. l - p and so places l + p - 2
// microbatches; here the loop runs until every microbatch is placed, and when
// l < 2p - 1 the front group and the rear take what there is, so the output
// is always a permutation of the input (tested for every l, p <= 64).
//
// GETINTERVAL follows the pipeline recurrence over the real per-rank order
// (pipeline/schedules.h): an action ends at max(end of the previous action on
// its rank, end of the action it depends on) + its duration. Microbatches not
// yet placed count with the mean duration of those left. For 1F1B every
// window depends on placed microbatches only, so each action is computed once
// and the whole reordering costs O(l p) plus the selections. The VPP variant
// (interleaved 1F1B) sums the windows in front of a microbatch's v forward
// chunks on the first rank, as the paper describes in one sentence.
#pragma once

#include <vector>

namespace loom {

// The compute order of a 1F1B (vpp 1) or interleaved pipeline of `ranks`
// ranks and `microbatches` positions, with each action's predecessor on its
// rank and its input dependency. Depends only on the shape: build it once and
// reorder every pipeline of that shape with it (MMScale reorders one pipeline
// per encoder DP rank). Throws loom::Error for a shape the schedule rejects.
class PipelineShape {
 public:
  PipelineShape(int ranks, int microbatches, int vpp = 1);
  int ranks() const { return ranks_; }
  int microbatches() const { return microbatches_; }
  int vpp() const { return vpp_; }

  struct Node {
    bool forward = true;
    int stage = 0, position = 0, rank = 0;
    int prev = -1, dep = -1;  // previous action on the rank; the action whose output it needs
  };
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<int>& rank0() const { return rank0_; }                           // first rank's actions, in order
  const std::vector<std::vector<int>>& forwards_at() const { return forwards_at_; }  // [position] -> indices into rank0

 private:
  int ranks_, microbatches_, vpp_;
  std::vector<Node> nodes_;
  std::vector<int> rank0_;
  std::vector<std::vector<int>> forwards_at_;
};

// One microbatch's predicted time on every virtual stage of the pipeline
// (stage v runs on rank v % ranks).
struct MicrobatchTimes {
  std::vector<double> forward_s;
  std::vector<double> backward_s;
};

// Returns order[position] = microbatch index. `vpp` > 1 uses the interleaved
// schedule (the microbatch count must then be a multiple of `ranks`). Every
// microbatch must have ranks x vpp stage times. Throws loom::Error otherwise.
std::vector<int> InterReorder(const std::vector<MicrobatchTimes>& microbatches, int ranks, int vpp = 1);
// The same with a prebuilt shape (microbatches.size() == shape.microbatches()).
std::vector<int> InterReorder(const std::vector<MicrobatchTimes>& microbatches, const PipelineShape& shape);

// Iteration time of the pipeline recurrence for `order` (no communication):
// the yardstick tests use to compare orders.
double PipelineTime_s(const std::vector<MicrobatchTimes>& microbatches, const std::vector<int>& order, int ranks,
                      int vpp = 1);

}  // namespace loom
