// Entrain's DP-level assignment (seed 004 §4.3, Algorithm 4 lines 1-2): the
// global batch split evenly over the data-parallel replicas, samples in
// descending encoder work each going to the replica with the least LLM work
// so far. "Evenly" (the thesis gives no cap): each replica takes exactly
// B / DP samples, a full replica takes no more. Ties: the lower replica, and
// samples of equal encoder work in index order. Deterministic.
#pragma once

#include <vector>

#include "loom/strategies/entrain/stratified_assignment.h"

namespace loom {

// Sample indices per replica. Throws loom::Error when dp < 1 or the samples
// do not split into dp equal minibatches.
std::vector<std::vector<int>> DpAssignment(const std::vector<SampleWork>& samples, int dp);

}  // namespace loom
