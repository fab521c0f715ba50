#include "loom/algo/lpt.h"

#include <algorithm>
#include <numeric>
#include <queue>

#include "loom/error.h"

namespace loom {

namespace {

// Item indices by descending size, ties by index.
std::vector<int> DescendingOrder(const std::vector<double>& sizes) {
  std::vector<int> order(sizes.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return sizes[a] > sizes[b] || (sizes[a] == sizes[b] && a < b); });
  return order;
}

}  // namespace

std::vector<int> LptPartition(const std::vector<double>& sizes, int bins) {
  if (bins < 1) throw Error("LPT: need at least one bin");
  using Entry = std::pair<double, int>;  // (load, bin): the least load, then the lowest bin, on top
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
  for (int b = 0; b < bins; ++b) heap.push({0.0, b});
  std::vector<int> bin_of(sizes.size(), 0);
  for (int i : DescendingOrder(sizes)) {
    auto [load, b] = heap.top();
    heap.pop();
    bin_of[i] = b;
    heap.push({load + sizes[i], b});
  }
  return bin_of;
}

std::vector<int> BalancedLptPartition(const std::vector<double>& sizes, const std::vector<int>& capacities) {
  const int bins = static_cast<int>(capacities.size());
  if (bins < 1) throw Error("balanced LPT: need at least one bin");
  int64_t total = 0;
  for (int c : capacities) {
    if (c < 0) throw Error("balanced LPT: capacities must be >= 0");
    total += c;
  }
  if (total != static_cast<int64_t>(sizes.size())) {
    throw Error("balanced LPT: capacities sum to " + std::to_string(total) + ", there are " +
                std::to_string(sizes.size()) + " items");
  }
  const std::vector<int> order = DescendingOrder(sizes);
  std::vector<double> load(bins, 0.0);
  std::vector<int> room = capacities;
  std::vector<int> bin_of(sizes.size(), 0);
  std::vector<int> open;
  size_t next = 0;
  while (next < order.size()) {
    // This round: every bin with room, least loaded first; they take the next
    // items in descending size (largest item to the least-loaded bin).
    open.clear();
    for (int b = 0; b < bins; ++b) {
      if (room[b] > 0) open.push_back(b);
    }
    std::sort(open.begin(), open.end(), [&](int a, int b) { return load[a] < load[b] || (load[a] == load[b] && a < b); });
    for (int b : open) {
      if (next == order.size()) break;
      const int i = order[next++];
      bin_of[i] = b;
      load[b] += sizes[i];
      --room[b];
    }
  }
  return bin_of;
}

std::vector<double> BinLoads(const std::vector<double>& sizes, const std::vector<int>& assignment, int bins) {
  std::vector<double> load(bins, 0.0);
  for (size_t i = 0; i < sizes.size(); ++i) load[assignment[i]] += sizes[i];
  return load;
}

}  // namespace loom
