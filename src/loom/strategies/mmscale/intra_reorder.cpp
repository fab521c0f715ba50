#include "loom/strategies/mmscale/intra_reorder.h"

#include <algorithm>
#include <numeric>

#include "loom/algo/lpt.h"

namespace loom {

std::vector<std::vector<int>> IntraReorder(const std::vector<double>& sizes, const std::vector<int>& capacities) {
  std::vector<int> order;
  const std::vector<int> bin = BalancedLptPartition(sizes, capacities, &order);
  std::vector<std::vector<int>> groups(capacities.size());
  for (size_t g = 0; g < groups.size(); ++g) groups[g].reserve(capacities[g]);
  for (int i : order) groups[bin[i]].push_back(i);
  return groups;
}

}  // namespace loom
