// Longest-processing-time-first partitioning of items (sizes >= 0) into bins,
// minimizing the largest bin load. One implementation for every strategy that
// balances work across ranks (MMScale intra-microbatch reordering, Cornstarch
// context-parallel blocks).
#pragma once

#include <vector>

namespace loom {

// Graham's LPT: items in descending size, each to the least-loaded bin.
// Guarantee: max load <= (4/3 - 1/(3 bins)) x optimum. Returns the bin of each
// item. Ties go to the lower item index and the lower bin, so the result is
// deterministic.
std::vector<int> LptPartition(const std::vector<double>& sizes, int bins);

// LPT with exact bin cardinalities (bin b receives capacities[b] items; the
// capacities must sum to the item count). Items go in descending size in
// rounds: each round hands one item to every bin that still has room, the
// largest to the least-loaded. Guarantee when all capacities are equal
// (docs/strategies.md, "mmscale"): the spread of bin loads never exceeds
// the largest minus the smallest size, so
//   max load <= optimum + (1 - 1/bins) x (max size - min size).
// `descending`, if given, receives the item indices by descending size.
std::vector<int> BalancedLptPartition(const std::vector<double>& sizes, const std::vector<int>& capacities,
                                      std::vector<int>* descending = nullptr);

// Per-bin sums of `sizes` under `assignment`.
std::vector<double> BinLoads(const std::vector<double>& sizes, const std::vector<int>& assignment, int bins);

}  // namespace loom
