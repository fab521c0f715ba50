#include "loom/spec/cluster.h"
#include "loom/path_kind.h"

#include <fmt/format.h>

#include <filesystem>
#include <functional>
#include <regex>

#include "loom/did_you_mean.h"
#include "loom/error.h"
#include "loom/spec/yaml_reader.h"

namespace loom {

namespace {

constexpr double kGiga = 1e9;
constexpr double kGbit = 1e9 / 8;
// Per-hop latencies as NCCL sees them (launch + protocol), not wire latency:
// the usual alpha terms of alpha-beta models of NVLink, PCIe and IB/RoCE.
constexpr double kNvlinkLatency_s = 2e-6;
constexpr double kPcieLatency_s = 5e-6;
constexpr double kNetworkLatency_s = 10e-6;

void Finish(Cluster& c) {
  c.mem_headroom_bytes = kDefaultMemHeadroomFraction * static_cast<double>(c.gpu.mem_bytes);
  c.nvlink = {c.gpu.nvlink_bytes_per_s, kNvlinkLatency_s};
  c.pcie = {c.gpu.pcie_bytes_per_s, kPcieLatency_s};
  if (c.nvlink_domain == c.gpus_per_node) {
    c.pcie = c.nvlink;  // NVSwitch: every pair in the node is on NVLink
  }
  c.network = {c.nics_per_node * c.nic_bytes_per_s / c.gpus_per_node, kNetworkLatency_s};
}

Cluster Server(const std::string& gpu_name, int nodes, int per_node) {
  Cluster c;
  c.gpu = FindGpu(gpu_name);
  c.nodes = nodes;
  c.gpus_per_node = per_node;
  if (gpu_name == "a40") {
    // A40 servers: NVLink bridges join GPU pairs; the rest is PCIe 4.0; one 200 Gb/s HCA.
    c.nvlink_domain = per_node % 2 == 0 ? 2 : 1;
    c.nics_per_node = 1;
    c.nic_bytes_per_s = 200 * kGbit;
  } else {
    // HGX boards: NVSwitch across all GPUs, one NIC per GPU (rail-optimized).
    c.nvlink_domain = per_node;
    c.nics_per_node = per_node;
    // ConnectX-7 at 400 Gb/s per GPU on H100, H200, HGX B200 and GB200 NVL72 (a GB200
    // "node" is an NVL72 rack: one NVLink domain of up to 72 GPUs).
    const bool ndr = gpu_name == "h100" || gpu_name == "h200" || gpu_name == "b200" || gpu_name == "gb200";
    c.nic_bytes_per_s = (ndr ? 400 : 200) * kGbit;
    if (gpu_name == "a800") {
      c.nics_per_node = 4;  // MMScale §7: 4x200 Gb/s RoCE per A800 node
    }
  }
  if (c.nvlink_domain < 1 || per_node % c.nvlink_domain != 0) {
    c.nvlink_domain = 1;
  }
  c.name = fmt::format("{}:{}x{}", gpu_name, nodes, per_node);
  Finish(c);
  return c;
}

struct Testbed {
  const char* name;
  const char* description;
  std::function<Cluster()> make;
};

const std::vector<Testbed>& Testbeds() {
  static const std::vector<Testbed> beds = {
      {"mosaic-testbed", "Mosaic §5.1: 4 HGX nodes x 8 H100, NVLink 900 GB/s, 8x400 Gb/s IB",
       [] { return Server("h100", 4, 8); }},
      {"mmscale-cluster", "MMScale §7: 162 nodes x 8 A800 (1296 GPUs), NVLink 300 GB/s bidirectional, 4x200 Gb/s RoCE",
       [] {
         Cluster c = Server("a800", 162, 8);
         c.gpu.nvlink_bytes_per_s = 150 * kGiga;  // the paper's "300GB/s (bidirectional)"
         Finish(c);
         return c;
       }},
      {"pipeweaver-testbed", "PipeWeaver §8: 8 nodes x 8 H800, NVLink 200 GB/s, 8x200 Gb/s RoCE",
       [] { return Server("h800", 8, 8); }},
      {"cornstarch-testbed", "Cornstarch §3.5: 6 nodes x 4 A40-48GB, NVLink pairs + PCIe 4.0, 200 Gb/s IB",
       [] { return Server("a40", 6, 4); }},
      {"entrain-testbed", "Entrain §4.7: 4 nodes x 4 A40-48GB, NVLink pairs + PCIe 4.0, 200 Gb/s IB",
       [] { return Server("a40", 4, 4); }},
      {"entrain-64",
       "Entrain §4.7's emulated 64 GPUs: 16 nodes x 4 A40-48GB (the thesis runs one 16-GPU replica of "
       "entrain-testbed at a time, four times, and takes the slowest)",
       [] { return Server("a40", 16, 4); }},
      {"oobleck-testbed", "Oobleck §2.7: 30 nodes x 1 A40, 200 Gb/s IB", [] { return Server("a40", 30, 1); }},
  };
  return beds;
}

}  // namespace

Link Cluster::LinkForSpan(int span) const {
  if (span <= nvlink_domain) {
    return nvlink;
  }
  if (span <= gpus_per_node) {
    return pcie;
  }
  return network;
}

int MaxGpusPerNode(const std::string& gpu_name) { return gpu_name == "gb200" ? 72 : 16; }

Cluster MakeCluster(const std::string& gpu_name, int nodes, int gpus_per_node) {
  if (nodes < 1 || gpus_per_node < 1) {
    throw Error(fmt::format("cluster {}:{}x{}: node and GPU counts must be >= 1", gpu_name, nodes, gpus_per_node));
  }
  if (nodes > kMaxNodes) {
    throw Error(fmt::format("cluster {}:{}x{}: at most {} nodes ({} GPUs of 16 per node)", gpu_name, nodes,
                            gpus_per_node, kMaxNodes, kMaxNodes * 16));
  }
  if (gpus_per_node > MaxGpusPerNode(gpu_name)) {
    throw Error(fmt::format("cluster {}:{}x{}: at most {} GPUs per node ({})", gpu_name, nodes, gpus_per_node,
                            MaxGpusPerNode(gpu_name),
                            gpu_name == "gb200" ? "an NVL72 rack" : "servers hold 1-16; gb200 racks 1-72"));
  }
  return Server(gpu_name, nodes, gpus_per_node);
}

std::vector<std::string> TestbedNames() {
  std::vector<std::string> names;
  for (const auto& t : Testbeds()) {
    names.push_back(t.name);
  }
  return names;
}

Cluster ParseCluster(const std::string& yaml_text, const std::string& file) {
  YamlMap doc(ParseYaml(yaml_text, file), file, "");
  std::string name = doc.String("cluster");
  std::string gpu_name = doc.String("gpu");
  try {
    FindGpu(gpu_name);
  } catch (const Error& e) {
    throw doc.ErrorAt("gpu", e.what());
  }
  if (!doc.Has("nodes")) doc.PositiveInt("nodes");  // says it is missing
  if (!doc.Has("gpus_per_node")) doc.PositiveInt("gpus_per_node");
  int nodes = static_cast<int>(doc.PositiveIntAtMost("nodes", 0, kMaxNodes));
  int per_node = static_cast<int>(doc.PositiveIntAtMost("gpus_per_node", 0, MaxGpusPerNode(gpu_name)));
  Cluster c = Server(gpu_name, nodes, per_node);
  c.name = name;
  c.description = doc.String("description", "");
  c.nvlink_domain = static_cast<int>(doc.PositiveInt("nvlink_domain", c.nvlink_domain));
  if (per_node % c.nvlink_domain != 0) {
    throw doc.ErrorAt("nvlink_domain",
                      fmt::format("must divide gpus_per_node ({}), got {}", per_node, c.nvlink_domain));
  }
  // Links from a modem's to a thousand times NVLink 5's: a time priced over 1e-300 Gbit/s
  // printed 300 digits (second audit C034).
  const auto link = [&](const char* key, double fallback, const char* unit) {
    const double v = doc.PositiveReal(key, fallback);
    if (v < 1e-3 || v > 1e6) {
      throw doc.ErrorAt(key, fmt::format("{} {}; valid: 0.001..1000000 {}", v, unit, unit));
    }
    return v;
  };
  c.gpu.nvlink_bytes_per_s = link("nvlink_GBps", c.gpu.nvlink_bytes_per_s / kGiga, "GB/s") * kGiga;
  c.gpu.pcie_bytes_per_s = link("pcie_GBps", c.gpu.pcie_bytes_per_s / kGiga, "GB/s") * kGiga;
  // Bounded before the conversion to bytes (an int64): no GPU holds a PiB.
  const double mem_gib = doc.PositiveReal("gpu_mem_GiB", static_cast<double>(c.gpu.mem_bytes) / (1 << 30));
  if (mem_gib > 1 << 20) {
    throw doc.ErrorAt("gpu_mem_GiB", fmt::format("{} GiB; valid: a GPU's memory, at most {} GiB", mem_gib, 1 << 20));
  }
  c.gpu.mem_bytes = static_cast<int64_t>(mem_gib * (1 << 30));
  c.nics_per_node = static_cast<int>(doc.PositiveIntAtMost("nics_per_node", c.nics_per_node, 1024));
  c.nic_bytes_per_s = link("nic_Gbps", c.nic_bytes_per_s / kGbit, "Gbit/s") * kGbit;
  Finish(c);
  if (doc.Has("mem_headroom_GiB")) {
    const double gib = doc.NonNegativeReal("mem_headroom_GiB", 0);
    c.mem_headroom_bytes = gib * (1 << 30);
    if (c.mem_headroom_bytes >= static_cast<double>(c.gpu.mem_bytes)) {
      throw doc.ErrorAt("mem_headroom_GiB", fmt::format("must be less than gpu_mem_GiB ({}), got {}",
                                                        static_cast<double>(c.gpu.mem_bytes) / (1 << 30), gib));
    }
  }
  doc.RejectUnknownKeys();
  return c;
}

Cluster LoadCluster(const std::string& name_or_path) {
  for (const auto& t : Testbeds()) {
    if (name_or_path == t.name) {
      Cluster c = t.make();
      c.name = t.name;
      c.description = t.description;
      return c;
    }
  }
  static const std::regex shape(R"(^([a-z0-9]+):(-?[0-9]+)x(-?[0-9]+)$)");
  std::smatch m;
  if (std::regex_match(name_or_path, m, shape)) {
    FindGpu(m[1]);  // names the valid GPUs when unknown
    // Counts past MakeCluster's limits are errors there; keep them in range of an int first.
    auto count = [&](const std::string& digits) {
      if (digits.size() > 9) {
        throw Error(fmt::format("cluster {}: {} is out of range; at most {} nodes of at most 16 GPUs", name_or_path,
                                digits, kMaxNodes));
      }
      return std::stoi(digits);
    };
    return MakeCluster(m[1], count(m[2]), count(m[3]));
  }
  if (IsInputFile(KindOfPath(name_or_path))) {
    return ParseCluster(ReadTextFile(name_or_path, "cluster YAML"), name_or_path);
  }
  if (KindOfPath(name_or_path) == PathKind::kDirectory) {
    throw Error(fmt::format("{}: is a directory; expected a cluster YAML file, GPU:NODESxPER_NODE or a testbed name",
                            name_or_path));
  }
  std::string beds;
  for (const auto& t : TestbedNames()) {
    beds += ", " + t;
  }
  // A shape whose GPU is misspelt ("H100:2x8") is suggested with the GPU's name.
  std::string suggestion = ClosestName(name_or_path, TestbedNames());
  static const std::regex any_case(R"(^([A-Za-z0-9]+):(-?[0-9]+)x(-?[0-9]+)$)");
  if (std::smatch s; suggestion.empty() && std::regex_match(name_or_path, s, any_case)) {
    std::vector<std::string> gpus;
    for (const auto& g : BuiltinGpus()) gpus.push_back(g.name);
    if (const std::string gpu = ClosestName(s[1], gpus); !gpu.empty()) {
      suggestion = fmt::format("{}:{}x{}", gpu, s[2].str(), s[3].str());
    }
  }
  throw Error(
      fmt::format("unknown cluster '{}': write GPU:NODESxPER_NODE (e.g. h800:8x8), a "
                  "testbed name{}, or a path to a cluster YAML file{}",
                  name_or_path, beds, suggestion.empty() ? "" : "; did you mean '" + suggestion + "'?"));
}

}  // namespace loom
