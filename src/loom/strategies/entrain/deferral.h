// Entrain's pairwise microbatch deferral (seed 004 §4.5.2, Algorithm 4 lines
// 7-15): the LLM need not process a microbatch's samples in the slot their
// encoder did. Microbatches by descending LLM load split into the overloaded
// top half S_ol and the underloaded bottom half S_ul; an overloaded i paired
// with an underloaded j hands the LLM work of some of its samples to j's slot.
//   - Deferral set: the samples of i whose LLM work sums closest to
//     delta = (w_i - w_j) / 2 (algo/subset_sum.h ClosestSubset; samples are
//     atomic). That set minimises the pair's bottleneck, since
//     max(w_i - d, w_j + d) = (w_i + w_j) / 2 + |d - delta|.
//   - Eq. 4.3: V_ij = max(w_i - d_ij, w_j + d_ij); alone, L_i = w_i.
//   - BottleneckMatch: T* is the least value of V u L for which every
//     critical microbatch (L_i > T) has a partner with V_ij <= T, found by
//     binary search (feasibility is monotone) over a maximum bipartite
//     matching (algo/matching.h); the others pair with the remaining S_ul
//     in order, deferring nothing.
//   - Order: interleaved pairs (ol, its ul partner, ...) by descending
//     overloaded load, so deferred activations wait at most one microbatch.
// Odd K (the thesis is silent): the median microbatch pairs with nobody, runs
// last and bounds T* from below. Ties: microbatches of equal load keep their
// index order; equally close deferral sums take the smaller. Deterministic.
#pragma once

#include <vector>

namespace loom {

struct DeferralPair {
  int overloaded = -1, underloaded = -1;  // microbatch indices
  std::vector<int> deferred;              // sample indices moved from overloaded's LLM slot to underloaded's
};

struct DeferralPlan {
  double bottleneck = 0;            // T*: the largest LLM load after deferral
  std::vector<DeferralPair> pairs;  // in execution order
  int unpaired = -1;                // odd K: the median microbatch, run last
  std::vector<int> order;           // microbatch execution order
  std::vector<double> llm_load;     // per microbatch, after deferral
};

// `microbatches`: sample indices per microbatch; `llm_work`: per sample.
// Throws loom::Error for negative work or a sample index out of range.
DeferralPlan PairwiseDeferral(const std::vector<std::vector<int>>& microbatches, const std::vector<double>& llm_work);

}  // namespace loom
