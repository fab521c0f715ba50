// PipeWeaver's model-layer tuning (§6.3): per stage pair (the forward and the
// backward of one stage and sub-microbatch) choose each layer's recomputation
// (none, selective, full) so that the sum of stage times is least while every
// rank's activations stay within its memory at every stage-pair start of the
// interleaved timeline.
//  1. Candidates per pair, by multiple-choice knapsack over its layers: the
//     fastest combination, the most memory-frugal one, and for K - 2 memory
//     bounds evenly between them the fastest combination within the bound
//     (exact DP on a memory grid, each layer's memory rounded up, so a
//     candidate never exceeds its bound).
//  2. The ILP: one binary per (pair, candidate), one candidate per pair; for
//     each pair k on rank p, the pairs of p live at k's start (s_i <= s_k <= t_i,
//     taken in the rank's execution order so zero-length stages tie right)
//     hold at most M_p. Rows that cannot bind are dropped, with the
//     variables of pairs in none of the rest (they take their fastest candidate). Solved by CBC from a greedy warm
//     start, stopping at a relative gap (5%, as the paper).
// Offload to host memory is not modelled (the cluster has no host link).
#pragma once

#include <array>
#include <string>
#include <vector>

#include "loom/cost/layer_pricing.h"
#include "loom/strategies/pipeweaver/interleave.h"

namespace loom {

struct TuningCandidate {
  double time_s = 0;            // forward + backward of the pair
  double activation_bytes = 0;  // held from the forward to the backward
  std::string layers;           // one letter per layer: n, s, f
};

// K candidates (fewer when some coincide), fastest first. `grid` memory steps.
std::vector<TuningCandidate> PairCandidates(const std::vector<std::array<LayerTimes, 3>>& layers, int K = 4,
                                            int grid = 64);

struct TuningOptions {
  int candidates = 4;  // K
  double relative_gap = 0.05;
  int max_nodes = 1000;  // CBC's branch-and-bound budget (deterministic, unlike a time limit)
  int max_variables = 4000;  // larger ILPs keep the greedy warm start (CBC's set-up alone takes seconds)
  bool use_solver = true;    // false: the greedy warm start alone
};

struct TuningResult {
  bool feasible = false;    // some choice fits (else `choice` is empty)
  std::vector<int> choice;  // per pair (index into flow forward stages order), the candidate
  double objective_s = 0;   // sum of the chosen pairs' times
  double greedy_s = 0;      // the warm start's
  bool optimal = false;     // proven within the gap
  int variables = 0, rows = 0;
};

// `pairs[i]` is the forward flow stage of pair i; `candidates[i]` its options.
TuningResult TuneLayers(const StageFlow& flow, const Interleaving& timeline, const std::vector<int>& pairs,
                        const std::vector<std::vector<TuningCandidate>>& candidates, const TuningOptions& options = {});

}  // namespace loom
