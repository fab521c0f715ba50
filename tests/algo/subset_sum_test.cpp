// Cardinality-constrained subset sum against brute force.
#include "loom/algo/subset_sum.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "loom/error.h"

namespace loom {
namespace {

double BestGap(const std::vector<double>& v, int k, double target) {
  const int n = static_cast<int>(v.size());
  double best = 1e300;
  for (int mask = 0; mask < (1 << n); ++mask) {
    if (__builtin_popcount(mask) != k) continue;
    double s = 0;
    for (int i = 0; i < n; ++i) {
      if (mask >> i & 1) s += v[i];
    }
    best = std::min(best, std::abs(s - target));
  }
  return best;
}

// The grid's span: the sum of the k largest values.
double SumOfLargest(std::vector<double> v, int k) {
  std::sort(v.rbegin(), v.rend());
  double s = 0;
  for (int i = 0; i < k; ++i) s += v[i];
  return s;
}

double Sum(const std::vector<double>& v, const std::vector<int>& idx) {
  double s = 0;
  for (int i : idx) s += v[i];
  return s;
}

TEST(SubsetSum, ExactOnIntegersOnTheGrid) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> u(0, 20);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + trial % 12, k = trial % (n + 1);
    std::vector<double> v(n);
    for (auto& x : v) x = u(rng);
    const double span = SumOfLargest(v, k);
    const double target = u(rng) * k * 0.7;
    // One grid step per unit: every value sits on the grid.
    const auto idx = ClosestSubsetOfSize(v, k, target, std::max(1, static_cast<int>(span)));
    ASSERT_EQ(static_cast<int>(idx.size()), k);
    EXPECT_TRUE(std::is_sorted(idx.begin(), idx.end()));
    EXPECT_EQ(std::set<int>(idx.begin(), idx.end()).size(), idx.size());
    EXPECT_NEAR(std::abs(Sum(v, idx) - target), BestGap(v, k, target), 1e-9) << "trial " << trial;
  }
}

TEST(SubsetSum, WithinTheStatedGridErrorOnReals) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(0.01, 3);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 2 + trial % 11, k = 1 + trial % (n - 1);
    std::vector<double> v(n);
    for (auto& x : v) x = u(rng);
    const double span = SumOfLargest(v, k);
    const double target = u(rng) * k;
    const int steps = 64;
    const auto idx = ClosestSubsetOfSize(v, k, target, steps);
    ASSERT_EQ(static_cast<int>(idx.size()), k);
    EXPECT_LE(std::abs(Sum(v, idx) - target), BestGap(v, k, target) + k * span / steps + 1e-12);
  }
}

TEST(SubsetSum, RejectsImpossibleCounts) {
  EXPECT_THROW(ClosestSubsetOfSize({1, 2}, 3, 1), Error);
  EXPECT_THROW(ClosestSubsetOfSize({1, 2}, -1, 1), Error);
  EXPECT_TRUE(ClosestSubsetOfSize({1, 2}, 0, 1).empty());
}

// Subsets of any size (Entrain's deferral set): exact on small integers,
// within the grid's bound on reals, against every subset.
TEST(ClosestSubset, AnySizeEqualsBruteForce) {
  std::mt19937 rng(21);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 9);
    const bool integers = trial % 2 == 0;
    std::vector<double> v(n);
    for (auto& x : v) x = integers ? static_cast<double>(rng() % 12) : (rng() % 10000) / 997.0;
    double total = 0;
    for (double x : v) total += x;
    const double target = (rng() % 1000) / 1000.0 * total;
    double best = 1e300;
    for (int mask = 0; mask < (1 << n); ++mask) {
      double sum = 0;
      for (int i = 0; i < n; ++i) sum += (mask >> i & 1) ? v[i] : 0;
      best = std::min(best, std::abs(sum - target));
    }
    const auto chosen = ClosestSubset(v, target);
    double sum = 0;
    for (size_t c = 0; c < chosen.size(); ++c) {
      if (c > 0) {
        ASSERT_LT(chosen[c - 1], chosen[c]);  // ascending, each once
      }
      sum += v[chosen[c]];
    }
    const double step = total / 4096;
    if (integers) {
      EXPECT_EQ(std::abs(sum - target), best) << "trial " << trial;
    } else {
      EXPECT_LE(std::abs(sum - target), best + n * step / 2 + 1e-9) << "trial " << trial;
    }
  }
  // Equally close sums: the smaller (0 and 2 are both 1 from 1).
  EXPECT_TRUE(ClosestSubset({2, 6}, 1).empty());
  EXPECT_EQ(ClosestSubset({2, 6}, 2), std::vector<int>{0});
  EXPECT_THROW(ClosestSubset({1, -1}, 0), Error);
}

}  // namespace
}  // namespace loom
