#include <gtest/gtest.h>

#include <filesystem>

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
  ExpectError([] { LoadCluster("h900:1x8"); },
              {"unknown GPU 'h900'", "a40, a800, h800, h100, h200, b200, gb200", "did you mean 'h800'?"});
  ExpectError([] { LoadCluster("h100:0x8"); }, {"must be >= 1"});
  ExpectError([] { LoadCluster("h100:-1x8"); }, {"must be >= 1"});
  ExpectError([] { LoadCluster("h100:2x32"); }, {"at most 16 GPUs per node"});
  ExpectError([] { LoadCluster("gb200:1x73"); }, {"at most 72 GPUs per node (an NVL72 rack)"});
  ExpectError([] { LoadCluster("big-cluster"); }, {"GPU:NODESxPER_NODE", "mosaic-testbed"});
  // A name close to a valid one is suggested.
  ExpectError([] { LoadCluster("H100:2x8"); }, {"unknown cluster 'H100:2x8'", "did you mean 'h100:2x8'?"});
  ExpectError([] { LoadCluster("mosaic-testbd"); }, {"did you mean 'mosaic-testbed'?"});
  // Links and NICs past any machine's (a time over 1e-300 Gbit/s printed 300 digits: C034).
  ExpectError([] { ParseCluster("cluster: c\ngpu: h100\nnodes: 2\ngpus_per_node: 8\nnic_Gbps: 1e-300\n", "c.yaml"); },
              {"c.yaml:5:", "nic_Gbps: 1e-300 Gbit/s; valid: 0.001..1000000 Gbit/s"});
  ExpectError([] { ParseCluster("cluster: c\ngpu: h100\nnodes: 2\ngpus_per_node: 8\nnvlink_GBps: 1e300\n", "c.yaml"); },
              {"nvlink_GBps: 1e+300 GB/s; valid: 0.001..1000000 GB/s"});
  ExpectError(
      [] { ParseCluster("cluster: c\ngpu: h100\nnodes: 2\ngpus_per_node: 8\nnics_per_node: 1000000000\n", "c.yaml"); },
      {"nics_per_node", "must be at most 1024"});
  // A folder is said to be one (second audit C060: "unknown cluster").
  const std::string dir = std::filesystem::temp_directory_path().string();
  ExpectError([&] { LoadCluster(dir); }, {dir + ": is a directory; expected a cluster YAML file"});
}

// Blackwell GPUs by their datasheets (per GPU: the HGX B200 board's totals / 8,
// the GB200 NVL72 rack's / 72; dense = the "with sparsity" figures / 2).
TEST(Cluster, BlackwellGpusHaveTheirDatasheetNumbers) {
  const Cluster b200 = LoadCluster("b200:2x8");
  EXPECT_DOUBLE_EQ(b200.gpu.peak_flops, 36e15 / 8 / 2);  // FP16/BF16 36 PFLOPS with sparsity
  EXPECT_DOUBLE_EQ(b200.gpu.hbm_bytes_per_s, 64e12 / 8);
  EXPECT_EQ(b200.gpu.mem_bytes, 1440'000'000'000 / 8);
  EXPECT_DOUBLE_EQ(b200.gpu.nvlink_bytes_per_s, 1.8e12 / 2);
  EXPECT_EQ(b200.nvlink_domain, 8);
  const Cluster gb200 = LoadCluster("gb200:2x72");
  EXPECT_DOUBLE_EQ(gb200.gpu.peak_flops, 360e15 / 72 / 2);
  EXPECT_DOUBLE_EQ(gb200.gpu.peak_fp32_flops, 5760e12 / 72);
  EXPECT_DOUBLE_EQ(gb200.gpu.hbm_bytes_per_s, 576e12 / 72);
  EXPECT_EQ(gb200.nvlink_domain, 72);  // the rack is one NVLink domain
  EXPECT_DOUBLE_EQ(gb200.LinkForSpan(72).bytes_per_s, 900e9);
  EXPECT_EQ(gb200.num_gpus(), 144);
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
  std::string gpu = test::WriteTemp("gpu_c.yaml", "cluster: x\ngpu: b300\nnodes: 1\ngpus_per_node: 8\n");
  test::ExpectError([&] { LoadCluster(gpu); }, {"gpu_c.yaml:2:", "unknown GPU 'b300'", "did you mean 'b200'?"});
}

}  // namespace
}  // namespace loom
