// Context-parallel assignment of query blocks (cost/cp_assignment.h):
// Cornstarch's worked examples (Fig. 3.3a and 3.3b), the zigzag split's exact
// balance on causal masks, and LPT against the optimum by brute force.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "loom/cost/cp_assignment.h"
#include "loom/data/attention_mask.h"
#include "loom/error.h"

namespace loom {
namespace {

TEST(CpAssignment, FigureThreeThreeAIsBalancedOnlyWhenSorted) {
  const std::vector<int64_t> work = {1, 2, 2, 4, 5, 2, 2, 8};
  const CpAssignment a = BalancedAssignment(work, 4);
  EXPECT_EQ(a.rank_work, (std::vector<double>{8, 6, 6, 6}));
  // b8 alone; b5 with b1; b4 with b6; b2, b3 and b7 together.
  EXPECT_EQ(a.rank_of_block, (std::vector<int>{1, 3, 3, 2, 1, 2, 3, 0}));
  // The thesis' pseudocode as written (blocks in order, each to the least
  // loaded GPU, ties to the lower) puts 12 on one GPU; the zigzag split 9
  // (ranks take blocks i and 7 - i).
  std::vector<double> in_order(4, 0);
  for (int64_t w : work) *std::min_element(in_order.begin(), in_order.end()) += static_cast<double>(w);
  EXPECT_EQ(*std::max_element(in_order.begin(), in_order.end()), 12);
  EXPECT_EQ(ZigzagAssignment(work, 4).rank_work, (std::vector<double>{9, 4, 4, 9}));
}

TEST(CpAssignment, FigureThreeThreeBSubBlocksSpreadLongRows) {
  // b1 (1 KV block) and b5 (5) on two compute units: 5 steps whole; cut into
  // pieces of at most 2 blocks (1 | 2, 2, 1) they take 3.
  EXPECT_EQ(KernelMakespan({1, 5}, 2, 0), 5);
  EXPECT_EQ(KernelMakespan({1, 5}, 2, 2), 3);
  EXPECT_EQ(KernelMakespan({8}, 4, 2), 2);  // Fig. 3.3b: a row of 8 in 4 sub-blocks of 2
  EXPECT_THROW(KernelMakespan({1}, 0, 0), Error);
  // Grid order, not LPT: rows 1, 1, 4 on two units. In order the 4 starts
  // when the first 1 ends and finishes at 5; sorted longest first it would be 4.
  EXPECT_EQ(KernelMakespan({1, 1, 4}, 2, 0), 5);
  EXPECT_EQ(KernelMakespan({4, 1, 1}, 2, 0), 4);
}

// Cornstarch's intra-GPU split as the simulator prices it: the busiest rank's
// kernel with sub-blocks over its kernel with whole rows, each by Graham's
// bound W / m + longest x (1 - 1/m) (W: the rank's rows x heads, m: units).
TEST(CpAssignment, SubBlockFactorIsTheBusiestRanksKernelRatio) {
  // Rows 1 and 5, one head, two SMs, sub-blocks of 2: (3 + 2/2) / (3 + 5/2).
  EXPECT_DOUBLE_EQ(SubBlockFactor({{1, 5}}, {1, 2, 2}), 4.0 / 5.5);
  // Two heads: twice the work, the same tail: (6 + 1) / (6 + 2.5). Many tiles hide the tail.
  EXPECT_DOUBLE_EQ(SubBlockFactor({{1, 5}}, {2, 2, 2}), 7.0 / 8.5);
  EXPECT_GT(SubBlockFactor({{1, 5}}, {64, 2, 2}), 0.98);
  // One SM: nothing to spread over; no work: nothing to save.
  EXPECT_DOUBLE_EQ(SubBlockFactor({{1}, {4, 4}}, {1, 1, 2}), 1.0);
  EXPECT_DOUBLE_EQ(SubBlockFactor({{}, {}}, {1, 4, 2}), 1.0);
  // The busiest ranks decide: rank 1 (work 8, longest 8) over rank 0 (work 2).
  EXPECT_DOUBLE_EQ(SubBlockFactor({{1, 1}, {8}}, {1, 4, 2}), (2 + 2 * 0.75) / (2 + 8 * 0.75));
  EXPECT_THROW(SubBlockFactor({{1}}, {0, 1, 1}), Error);
  EXPECT_THROW(SubBlockFactor({{1}}, {1, 1, 0}), Error);
}

TEST(CpAssignment, ZigzagBalancesACausalMaskExactly) {
  for (int cp : {1, 2, 4, 8}) {
    const int64_t blocks = 2 * cp * 3;
    const auto work = BlockWork(BuildMask({{blocks * 16, -1, 0}}, MaskLayout::kEmbedded), 16);
    const CpAssignment z = ZigzagAssignment(work, cp);
    for (double w : z.rank_work) EXPECT_EQ(w, z.rank_work[0]) << "cp " << cp;
  }
}

TEST(CpAssignment, LptWithinGrahamsBoundOfTheOptimum) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    const int cp = 2 + static_cast<int>(rng() % 3), n = 4 + static_cast<int>(rng() % 5);
    std::vector<int64_t> work(n);
    for (auto& w : work) w = 1 + static_cast<int64_t>(rng() % 20);
    // Optimum by trying every assignment.
    double best = 1e18;
    std::vector<int> a(n, 0);
    while (true) {
      std::vector<double> load(cp, 0);
      for (int i = 0; i < n; ++i) load[a[i]] += static_cast<double>(work[i]);
      best = std::min(best, *std::max_element(load.begin(), load.end()));
      int i = 0;
      while (i < n && ++a[i] == cp) a[i++] = 0;
      if (i == n) break;
    }
    const double lpt = BalancedAssignment(work, cp).max_work();
    EXPECT_LE(lpt, (4.0 / 3.0 - 1.0 / (3.0 * cp)) * best + 1e-9) << "trial " << trial;
    EXPECT_GE(lpt, best);
  }
}

TEST(CpAssignment, BalancedBeatsZigzagOnMultimodalMasks) {
  // Images embedded in causal text: per-block work depends on where the
  // images are; LPT's heaviest rank is never heavier than zigzag's.
  std::mt19937 rng(11);
  int better = 0;
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<MaskSegment> segments;
    for (int r = 0; r < 12; ++r)
      segments.push_back({16 * (1 + static_cast<int64_t>(rng() % 8)), r % 2 == 0 ? -1 : 0, 0});
    const auto work = BlockWork(BuildMask(segments, MaskLayout::kEmbedded), 16);
    const double z = ZigzagAssignment(work, 4).max_work(), b = BalancedAssignment(work, 4).max_work();
    EXPECT_LE(b, z) << "trial " << trial;
    better += b < z ? 1 : 0;
  }
  EXPECT_GT(better, 25);
}

}  // namespace
}  // namespace loom
