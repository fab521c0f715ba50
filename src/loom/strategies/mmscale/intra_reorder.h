// MMScale intra-microbatch reordering (paper §5.1, Alg. 2): spreads the
// samples of a global batch over the encoder's data-parallel groups so that
// the slowest group is as fast as possible (multiway number partitioning).
//
// Erratum fixed: Alg. 2 sorts ascending, which only guarantees 2 - 1/m, not
// the 4/3 it cites. Loom sorts descending (LPT) and keeps the number of
// samples per group fixed, because every backbone replica needs the same
// number of sequences: algo/lpt.h BalancedLptPartition. Guarantee with equal
// counts per group: max load <= optimum + (1 - 1/m) (largest - smallest size).
#pragma once

#include <vector>

namespace loom {

// groups[g] = the sample indices group g trains, largest first; group g gets
// exactly capacities[g] samples (they must sum to the number of sizes).
std::vector<std::vector<int>> IntraReorder(const std::vector<double>& sample_sizes, const std::vector<int>& capacities);

}  // namespace loom
