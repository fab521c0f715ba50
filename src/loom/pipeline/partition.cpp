#include "loom/pipeline/partition.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "loom/error.h"

namespace loom {

Partition MinMaxPartitionWithGpus(const std::vector<double>& costs, const std::vector<int>& gpus) {
  const int n = static_cast<int>(costs.size());
  const int stages = static_cast<int>(gpus.size());
  if (stages < 1 || stages > n) {
    throw Error(fmt::format("cannot split {} layers into {} stages: need 1 <= stages <= layers", n, stages));
  }
  std::vector<double> prefix(n + 1, 0.0);
  for (int i = 0; i < n; ++i) {
    prefix[i + 1] = prefix[i] + costs[i];
  }
  const double kInf = std::numeric_limits<double>::infinity();
  // best[s][i]: min over splits of layers [0, i) into stages 0..s of the max stage cost.
  std::vector<std::vector<double>> best(stages, std::vector<double>(n + 1, kInf));
  std::vector<std::vector<int>> arg(stages, std::vector<int>(n + 1, -1));
  for (int i = 1; i <= n; ++i) {
    best[0][i] = prefix[i] / gpus[0];
  }
  for (int s = 1; s < stages; ++s) {
    for (int i = s + 1; i <= n; ++i) {
      for (int j = s; j < i; ++j) {  // stage s holds [j, i)
        double c = std::max(best[s - 1][j], (prefix[i] - prefix[j]) / gpus[s]);
        if (c < best[s][i]) {
          best[s][i] = c;
          arg[s][i] = j;
        }
      }
    }
  }
  Partition p;
  p.begin.assign(stages + 1, 0);
  p.begin[stages] = n;
  for (int s = stages - 1, i = n; s > 0; --s) {
    i = arg[s][i];
    p.begin[s] = i;
  }
  for (int s = 0; s < stages; ++s) {
    p.stage_cost.push_back((prefix[p.begin[s + 1]] - prefix[p.begin[s]]) / gpus[s]);
  }
  p.max_cost = best[stages - 1][n];
  return p;
}

Partition MinMaxPartition(const std::vector<double>& costs, int stages) {
  return MinMaxPartitionWithGpus(costs, std::vector<int>(std::max(stages, 0), 1));
}

}  // namespace loom
