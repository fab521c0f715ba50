#include "loom/strategies/mmscale/intra_reorder.h"

#include <algorithm>

#include "loom/algo/lpt.h"

namespace loom {

std::vector<std::vector<int>> IntraReorder(const std::vector<double>& sizes, const std::vector<int>& capacities) {
  const std::vector<int> bin = BalancedLptPartition(sizes, capacities);
  std::vector<std::vector<int>> groups(capacities.size());
  for (size_t i = 0; i < sizes.size(); ++i) groups[bin[i]].push_back(static_cast<int>(i));
  for (auto& g : groups) {
    std::stable_sort(g.begin(), g.end(), [&](int a, int b) { return sizes[a] > sizes[b]; });
  }
  return groups;
}

}  // namespace loom
