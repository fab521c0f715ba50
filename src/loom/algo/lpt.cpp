#include "loom/algo/lpt.h"

#include <algorithm>
#include <numeric>
#include <queue>

#include "loom/error.h"

namespace loom {

namespace {

// Item indices by descending size, ties by index (sorting (size, index)
// pairs directly: no indirection in the comparisons).
std::vector<int> DescendingOrder(const std::vector<double>& sizes) {
  std::vector<std::pair<double, int>> keyed(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) keyed[i] = {-sizes[i], static_cast<int>(i)};
  std::sort(keyed.begin(), keyed.end());
  std::vector<int> order(sizes.size());
  for (size_t i = 0; i < keyed.size(); ++i) order[i] = keyed[i].second;
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

std::vector<int> BalancedLptPartition(const std::vector<double>& sizes, const std::vector<int>& capacities,
                                      std::vector<int>* descending) {
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
  std::vector<int> order = DescendingOrder(sizes);
  std::vector<double> load(bins, 0.0);
  std::vector<int> room = capacities;
  std::vector<int> bin_of(sizes.size(), 0);
  // Bins with room, least loaded first. Each round adds one item to every
  // open bin, largest to the least loaded, so the order changes little:
  // insertion sort restores it in near-linear time.
  std::vector<int> open;
  for (int b = 0; b < bins; ++b) {
    if (room[b] > 0) open.push_back(b);
  }
  auto before = [&](int a, int b) { return load[a] < load[b] || (load[a] == load[b] && a < b); };
  size_t next = 0;
  while (next < order.size()) {
    for (size_t i = 1; i < open.size(); ++i) {
      const int b = open[i];
      size_t j = i;
      for (; j > 0 && before(b, open[j - 1]); --j) open[j] = open[j - 1];
      open[j] = b;
    }
    for (int b : open) {
      if (next == order.size()) break;
      const int i = order[next++];
      bin_of[i] = b;
      load[b] += sizes[i];
      --room[b];
    }
    open.erase(std::remove_if(open.begin(), open.end(), [&](int b) { return room[b] == 0; }), open.end());
  }
  if (descending != nullptr) *descending = std::move(order);
  return bin_of;
}

std::vector<double> BinLoads(const std::vector<double>& sizes, const std::vector<int>& assignment, int bins) {
  std::vector<double> load(bins, 0.0);
  for (size_t i = 0; i < sizes.size(); ++i) load[assignment[i]] += sizes[i];
  return load;
}

}  // namespace loom
