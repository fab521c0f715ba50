// Maximum bipartite matching by augmenting paths (Kuhn's algorithm), one
// implementation for every strategy that pairs work (Entrain's
// BottleneckMatch, §4.5.2). O(V E); deterministic: left vertices in order,
// each trying its neighbours in the order given.
#pragma once

#include <vector>

namespace loom {

// `adjacent[l]`: the right vertices (0 .. right - 1) left vertex l may pair
// with. Returns the right partner of every left vertex, -1 when unmatched;
// the number matched is maximum. Throws loom::Error for a neighbour outside
// [0, right).
std::vector<int> MaxBipartiteMatching(const std::vector<std::vector<int>>& adjacent, int right);

}  // namespace loom
