#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "loom/pipeline/partition.h"
#include "test_util.h"

namespace loom {
namespace {

// PipeWeaver §2.2: 64 ViT layers of 6.75 ms then 64 LM layers of 10.5 ms into 16 stages.
TEST(Partition, PipeWeaverSection22Example) {
  std::vector<double> costs(64, 6.75);
  costs.insert(costs.end(), 64, 10.5);
  Partition p = MinMaxPartition(costs, 16);
  EXPECT_DOUBLE_EQ(p.max_cost, 73.5);                                                   // 7 LM layers
  EXPECT_DOUBLE_EQ(*std::min_element(p.stage_cost.begin(), p.stage_cost.end()), 63.0);  // 6 LM layers
  EXPECT_DOUBLE_EQ(std::accumulate(p.stage_cost.begin(), p.stage_cost.end(), 0.0), 1104.0);
}

// Brute force over every way to cut n layers into s contiguous stages.
double BruteForce(const std::vector<double>& c, int s, const std::vector<int>& gpus, size_t start = 0, int stage = 0) {
  if (stage == s - 1) {
    double sum = 0;
    for (size_t i = start; i < c.size(); ++i) sum += c[i];
    return sum / gpus[stage];
  }
  double best = 1e300;
  double sum = 0;
  for (size_t end = start + 1; end + (s - stage - 1) <= c.size(); ++end) {
    sum += c[end - 1];
    best = std::min(best, std::max(sum / gpus[stage], BruteForce(c, s, gpus, end, stage + 1)));
  }
  return best;
}

TEST(Partition, MatchesBruteForceOnRandomInstances) {
  uint64_t x = 12345;
  auto next = [&] {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return (x >> 33) % 100 + 1;
  };
  for (int trial = 0; trial < 200; ++trial) {
    int n = 1 + static_cast<int>(next() % 9);
    int s = 1 + static_cast<int>(next() % n);
    std::vector<double> c(n);
    for (auto& v : c) v = static_cast<double>(next());
    std::vector<int> gpus(s);
    for (auto& g : gpus) g = 1 + static_cast<int>(next() % 3);
    EXPECT_DOUBLE_EQ(MinMaxPartition(c, s).max_cost, BruteForce(c, s, std::vector<int>(s, 1)));
    Partition p = MinMaxPartitionWithGpus(c, gpus);
    EXPECT_DOUBLE_EQ(p.max_cost, BruteForce(c, s, gpus));
    EXPECT_DOUBLE_EQ(p.max_cost, *std::max_element(p.stage_cost.begin(), p.stage_cost.end()));
    for (int k = 0; k < s; ++k) EXPECT_LT(p.begin[k], p.begin[k + 1]);
  }
}

TEST(Partition, RejectsImpossibleSplits) {
  test::ExpectError([] { MinMaxPartition({1, 2}, 3); }, {"2 layers into 3 stages"});
  test::ExpectError([] { MinMaxPartition({1, 2}, 0); }, {"into 0 stages"});
}

}  // namespace
}  // namespace loom
