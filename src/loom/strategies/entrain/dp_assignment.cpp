#include "loom/strategies/entrain/dp_assignment.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "loom/error.h"

namespace loom {

std::vector<std::vector<int>> DpAssignment(const std::vector<SampleWork>& samples, int dp) {
  const int n = static_cast<int>(samples.size());
  if (dp < 1 || n % dp != 0) {
    throw Error(
        fmt::format("entrain: {} samples over {} data-parallel replicas; valid: dp >= 1 dividing the batch", n, dp));
  }
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return samples[a].encoder > samples[b].encoder; });
  std::vector<std::vector<int>> replicas(dp);
  std::vector<double> llm(dp, 0.0);
  const size_t cap = static_cast<size_t>(n / dp);
  for (int s : order) {
    int to = -1;
    for (int r = 0; r < dp; ++r) {
      if (replicas[r].size() < cap && (to < 0 || llm[r] < llm[to])) to = r;
    }
    replicas[to].push_back(s);
    llm[to] += samples[s].llm;
  }
  return replicas;
}

}  // namespace loom
