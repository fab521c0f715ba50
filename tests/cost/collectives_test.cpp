// Collective times equal their alpha-beta closed forms.
#include <gtest/gtest.h>

#include <cmath>

#include "loom/cost/collectives.h"

namespace loom {
namespace {

const Link kLink{100e9, 5e-6};

TEST(Collectives, PointToPoint) { EXPECT_DOUBLE_EQ(P2PTime_s(1e9, kLink), 5e-6 + 0.01); }

TEST(Collectives, RingAllReduce) {
  // 2(n-1) steps, each moving bytes/n.
  EXPECT_DOUBLE_EQ(RingAllReduceTime_s(1e9, 8, kLink), 14 * 5e-6 + 14.0 / 8 * 1e9 / 100e9);
  EXPECT_DOUBLE_EQ(RingAllReduceTime_s(1e9, 1, kLink), 0);
}

TEST(Collectives, TreeAllReduce) {
  EXPECT_DOUBLE_EQ(TreeAllReduceTime_s(1e9, 8, kLink), 2 * 3 * 5e-6 + 2 * 1e9 / 100e9);
  EXPECT_DOUBLE_EQ(TreeAllReduceTime_s(1e9, 5, kLink), 2 * 3 * 5e-6 + 2 * 1e9 / 100e9);
}

TEST(Collectives, AllGatherAndReduceScatter) {
  EXPECT_DOUBLE_EQ(AllGatherTime_s(8e8, 4, kLink), 3 * 5e-6 + 0.75 * 8e8 / 100e9);
  EXPECT_DOUBLE_EQ(ReduceScatterTime_s(8e8, 4, kLink), AllGatherTime_s(8e8, 4, kLink));
}

TEST(Collectives, HierarchicalAllReduce) {
  Link nv{450e9, 2e-6}, net{50e9, 10e-6};
  double expect = (7 * 2e-6 + 7.0 / 8 * 1e9 / 450e9) +        // reduce-scatter in the node
                  (6 * 10e-6 + 6.0 / 4 * (1e9 / 8) / 50e9) +  // ring across 4 nodes on bytes/8
                  (7 * 2e-6 + 7.0 / 8 * 1e9 / 450e9);         // all-gather in the node
  EXPECT_DOUBLE_EQ(HierarchicalAllReduceTime_s(1e9, 8, 4, nv, net), expect);
}

TEST(Collectives, GroupsPickTheirLinks) {
  Cluster c = LoadCluster("h100:4x8");
  // TP group of 8 inside a node: ring over NVLink.
  EXPECT_DOUBLE_EQ(GroupAllReduceTime_s(1e9, 8, 1, c), RingAllReduceTime_s(1e9, 8, c.nvlink));
  // DP group of 4, one rank per node (stride 8): cheaper of ring and tree on the network.
  EXPECT_DOUBLE_EQ(GroupAllReduceTime_s(1e9, 4, 8, c),
                   std::min(RingAllReduceTime_s(1e9, 4, c.network), TreeAllReduceTime_s(1e9, 4, c.network)));
  // DP group of 32 over all GPUs: hierarchical, never slower than a flat ring on the network.
  double hier = GroupAllReduceTime_s(1e9, 32, 1, c);
  EXPECT_LE(hier, HierarchicalAllReduceTime_s(1e9, 8, 4, c.nvlink, c.network) + 1e-15);
  EXPECT_LT(hier, RingAllReduceTime_s(1e9, 32, c.network));
}

}  // namespace
}  // namespace loom
