// Maximum bipartite matching (algo/matching.h) against brute force: its size
// is the largest over every assignment of left vertices to distinct right ones.
#include "loom/algo/matching.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>

#include "loom/error.h"

namespace loom {
namespace {

int BruteForceMaximum(const std::vector<std::vector<int>>& adjacent, int right) {
  std::vector<char> used(right, 0);
  std::function<int(size_t)> best = [&](size_t l) -> int {
    if (l == adjacent.size()) return 0;
    int most = best(l + 1);  // l unmatched
    for (int r : adjacent[l]) {
      if (used[r]) continue;
      used[r] = 1;
      most = std::max(most, 1 + best(l + 1));
      used[r] = 0;
    }
    return most;
  };
  return best(0);
}

TEST(Matching, MaximumEqualsBruteForce) {
  std::mt19937 rng(4);
  for (int trial = 0; trial < 300; ++trial) {
    const int left = 1 + static_cast<int>(rng() % 6), right = 1 + static_cast<int>(rng() % 6);
    std::vector<std::vector<int>> adjacent(left);
    for (auto& a : adjacent) {
      for (int r = 0; r < right; ++r) {
        if (rng() % 3 == 0) a.push_back(r);
      }
    }
    const std::vector<int> m = MaxBipartiteMatching(adjacent, right);
    ASSERT_EQ(static_cast<int>(m.size()), left);
    std::vector<char> used(right, 0);
    int size = 0;
    for (int l = 0; l < left; ++l) {
      if (m[l] < 0) continue;
      EXPECT_TRUE(std::find(adjacent[l].begin(), adjacent[l].end(), m[l]) != adjacent[l].end());  // an edge
      EXPECT_FALSE(used[m[l]]);                                                                   // once
      used[m[l]] = 1;
      ++size;
    }
    EXPECT_EQ(size, BruteForceMaximum(adjacent, right)) << "trial " << trial;
  }
}

TEST(Matching, AugmentsThroughAnEarlierChoice) {
  // Left 0 takes right 0 first; left 1 can only use right 0, so 0 must move to 1.
  EXPECT_EQ(MaxBipartiteMatching({{0, 1}, {0}}, 2), (std::vector<int>{1, 0}));
  EXPECT_THROW(MaxBipartiteMatching({{2}}, 2), Error);
}

}  // namespace
}  // namespace loom
