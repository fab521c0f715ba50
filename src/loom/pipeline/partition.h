// Contiguous stage partitioning: split a list of per-layer costs into S
// stages minimizing the slowest stage (min-max). Exact dynamic program
// (Cornstarch Eq. 3.5; Alpa's stage DP): D(i, s) = min_j max(D(j, s-1),
// P_i - P_j) over prefix sums P, O(N^2 S). The variant with per-stage GPU
// counts divides stage s's cost by gpus[s] (data parallel inside the stage);
// Oobleck's divide-and-conquer search over GPU counts will call it.
#pragma once

#include <vector>

namespace loom {

struct Partition {
  std::vector<int> begin;          // stage s holds layers [begin[s], begin[s+1]); size S + 1
  std::vector<double> stage_cost;  // cost of each stage (divided by its GPUs)
  double max_cost = 0;
  int num_stages() const { return static_cast<int>(stage_cost.size()); }
};

// REQUIRES: 1 <= stages <= costs.size(); costs >= 0. Ties go to the partition
// whose stage boundaries come earliest (deterministic).
Partition MinMaxPartition(const std::vector<double>& costs, int stages);
// Stage s's cost is its layers' sum / gpus[s]. REQUIRES: gpus[s] >= 1,
// gpus.size() <= costs.size().
Partition MinMaxPartitionWithGpus(const std::vector<double>& costs, const std::vector<int>& gpus);

}  // namespace loom
