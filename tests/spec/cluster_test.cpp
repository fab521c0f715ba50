#include <gtest/gtest.h>

#include "loom/spec/cluster.h"
#include "test_util.h"

namespace loom {
namespace {

using test::ExpectError;

TEST(Cluster, ShapeStringGivesTheGpusServer) {
  Cluster c = LoadCluster("h800:8x8");
  EXPECT_EQ(c.num_gpus(), 64);
  EXPECT_EQ(c.gpu.name, "h800");
  EXPECT_EQ(c.nvlink_domain, 8);
  EXPECT_DOUBLE_EQ(c.LinkForSpan(8).bytes_per_s, 200e9);
  // 8 NICs x 200 Gb/s over 8 GPUs = 25 GB/s per GPU per direction.
  EXPECT_DOUBLE_EQ(c.LinkForSpan(9).bytes_per_s, 8 * 200e9 / 8 / 8);
}

TEST(Cluster, A40ServersHaveNvlinkPairsAndPcie) {
  Cluster c = LoadCluster("cornstarch-testbed");
  EXPECT_EQ(c.num_gpus(), 24);
  EXPECT_EQ(c.nvlink_domain, 2);
  EXPECT_DOUBLE_EQ(c.LinkForSpan(2).bytes_per_s, 56.25e9);
  EXPECT_DOUBLE_EQ(c.LinkForSpan(4).bytes_per_s, 32e9);
  EXPECT_DOUBLE_EQ(c.LinkForSpan(5).bytes_per_s, 200e9 / 8 / 4);
}

TEST(Cluster, TestbedsMatchThePapers) {
  EXPECT_EQ(LoadCluster("mosaic-testbed").num_gpus(), 32);
  EXPECT_EQ(LoadCluster("pipeweaver-testbed").num_gpus(), 64);
  EXPECT_EQ(LoadCluster("mmscale-cluster").num_gpus(), 1296);
  EXPECT_DOUBLE_EQ(LoadCluster("mmscale-cluster").nvlink.bytes_per_s, 150e9);
  EXPECT_EQ(LoadCluster("entrain-testbed").num_gpus(), 16);
  EXPECT_EQ(LoadCluster("entrain-64").num_gpus(), 64);  // the thesis' emulated scale
  EXPECT_EQ(LoadCluster("entrain-64").gpus_per_node, 4);
  EXPECT_EQ(LoadCluster("oobleck-testbed").num_gpus(), 30);
  EXPECT_EQ(LoadCluster("oobleck-testbed").gpus_per_node, 1);
}

TEST(Cluster, BadNamesAndSizesAreErrors) {
  ExpectError([] { LoadCluster("h900:1x8"); }, {"unknown GPU 'h900'", "a40, a800, h800, h100, h200"});
  ExpectError([] { LoadCluster("h100:0x8"); }, {"must be >= 1"});
  ExpectError([] { LoadCluster("h100:-1x8"); }, {"must be >= 1"});
  ExpectError([] { LoadCluster("h100:2x32"); }, {"at most 16 GPUs per node"});
  ExpectError([] { LoadCluster("big-cluster"); }, {"GPU:NODESxPER_NODE", "mosaic-testbed"});
}

TEST(Cluster, YamlFileOverridesTheServerDefaults) {
  std::string path = test::WriteTemp("c.yaml", R"(cluster: lab
gpu: h100
nodes: 2
gpus_per_node: 4
nvlink_domain: 2
nics_per_node: 2
nic_Gbps: 100
)");
  Cluster c = LoadCluster(path);
  EXPECT_EQ(c.name, "lab");
  EXPECT_EQ(c.num_gpus(), 8);
  EXPECT_DOUBLE_EQ(c.network.bytes_per_s, 2 * 100e9 / 8 / 4);
  EXPECT_DOUBLE_EQ(c.LinkForSpan(3).bytes_per_s, 64e9);  // PCIe between NVLink pairs
  std::string bad =
      test::WriteTemp("bad_c.yaml", "cluster: x\ngpu: h100\nnodes: 2\ngpus_per_node: 4\nnvlink_domain: 3\n");
  test::ExpectError([&] { LoadCluster(bad); }, {"bad_c.yaml:5:", "nvlink_domain", "must divide gpus_per_node (4)"});
  std::string gpu = test::WriteTemp("gpu_c.yaml", "cluster: x\ngpu: b200\nnodes: 1\ngpus_per_node: 8\n");
  test::ExpectError([&] { LoadCluster(gpu); }, {"gpu_c.yaml:2:", "unknown GPU 'b200'"});
}

}  // namespace
}  // namespace loom
