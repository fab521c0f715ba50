#include "loom/strategies/mmscale/intra_reorder.h"

#include <algorithm>
#include <numeric>

#include "loom/algo/lpt.h"

namespace loom {

std::vector<std::vector<int>> IntraReorder(const std::vector<double>& sizes, const std::vector<int>& capacities) {
  const std::vector<int> bin = BalancedLptPartition(sizes, capacities);
  std::vector<int> order(sizes.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return sizes[a] > sizes[b] || (sizes[a] == sizes[b] && a < b); });
  std::vector<std::vector<int>> groups(capacities.size());
  for (size_t g = 0; g < groups.size(); ++g) groups[g].reserve(capacities[g]);
  for (int i : order) groups[bin[i]].push_back(i);
  return groups;
}

}  // namespace loom
