// A Cluster is `nodes` identical servers of `gpus_per_node` GPUs. Inside a node,
// GPUs in one NVLink domain (all 8 on an HGX board, pairs on A40 servers) talk
// over NVLink; other pairs in the node over PCIe; nodes over NICs. Invariants:
// all counts > 0, gpus_per_node % nvlink_domain == 0, every bandwidth > 0.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "loom/spec/gpu.h"

namespace loom {

class CostModel;  // cost/cost_model.h

// One hop class: per-GPU, per-direction bandwidth and a fixed latency.
struct Link {
  double bytes_per_s = 0;
  double latency_s = 0;
};

struct Cluster {
  std::string name;
  std::string description;
  GpuSpec gpu;
  int nodes = 1;
  int gpus_per_node = 1;
  int nvlink_domain = 1;  // GPUs that share NVLink; == gpus_per_node on NVSwitch boards
  Link nvlink;            // inside an NVLink domain
  Link pcie;              // between NVLink domains of one node
  Link network;           // across nodes, per GPU: nics * nic bandwidth / gpus_per_node
  // A measured ring step of this machine's collectives inside a node
  // (`loom profile`: a 2-process all-reduce costs latency_s * 2 + bytes /
  // bytes_per_s); zero bandwidth: none measured, collectives are priced
  // from the links above.
  Link collective;
  int nics_per_node = 1;
  double nic_bytes_per_s = 0;
  // Device memory a plan may not use: the CUDA context, NCCL's communicator
  // buffers and the caching allocator's fragmentation live there (about
  // 0.5 GiB of context on an H100 plus buffers per communicator). Default
  // kDefaultMemHeadroomFraction of gpu.mem_bytes (2 GiB of 80); cluster YAML
  // `mem_headroom_GiB` sets it. 0 <= mem_headroom_bytes < gpu.mem_bytes.
  double mem_headroom_bytes = 0;
  // What prices layers on this cluster's GPUs; null: the GPU's default (a
  // shipped measured profile, else the roofline). Set by `--profile`.
  std::shared_ptr<const CostModel> cost_model;

  int num_gpus() const { return nodes * gpus_per_node; }
  // What a plan's peak memory per GPU is checked against: gpu.mem_bytes
  // less the headroom.
  double usable_mem_bytes() const { return static_cast<double>(gpu.mem_bytes) - mem_headroom_bytes; }
  // The slowest link crossed by a group of `span` consecutive ranks (ranks are
  // packed node by node): NVLink inside a domain, PCIe inside a node, else network.
  Link LinkForSpan(int span) const;
};

// Builds "GPU:NODESxPER_NODE" (e.g. "h800:8x8") with that GPU's typical server
// interconnect, a named testbed, or a YAML file. Throws loom::Error otherwise.
Cluster LoadCluster(const std::string& name_or_path);
Cluster ParseCluster(const std::string& yaml_text, const std::string& file);
// The GPU's typical server (DGX/HGX for H*, A800, B200; a GB200 NVL72 rack; 4x
// A40 with NVLink pairs) at
// the given size. Throws loom::Error when a count is < 1.
// The largest cluster Loom plans: 65,536 nodes (a million GPUs), so GPU counts
// and their products with small factors stay inside an int.
constexpr int kMaxNodes = 65536;
constexpr double kDefaultMemHeadroomFraction = 0.025;
Cluster MakeCluster(const std::string& gpu_name, int nodes, int gpus_per_node);
// GPUs a node of `gpu_name` holds at most: 16 for servers, 72 for a GB200 NVL72
// rack (Loom's "node" there is the rack: one NVLink domain).
int MaxGpusPerNode(const std::string& gpu_name);
// Named testbeds of the seed papers' evaluations (docs/clusters.md).
std::vector<std::string> TestbedNames();

}  // namespace loom
