#include "loom/report/cluster_list.h"

#include <fmt/format.h>

#include "loom/human_bytes.h"
#include "loom/report/table.h"
#include "loom/spec/cluster.h"
#include "loom/spec/gpu.h"

namespace loom {

std::string FormatClusterList() {
  TextTable gpus({"gpu", "peak bf16 TFLOP/s", "HBM GB/s", "memory", "SMs", "NVLink GB/s/dir"});
  for (const auto& g : BuiltinGpus()) {
    gpus.AddRow({g.name, fmt::format("{:.1f}", g.peak_flops / 1e12), fmt::format("{:.0f}", g.hbm_bytes_per_s / 1e9),
                 HumanBytes(static_cast<double>(g.mem_bytes)), fmt::format("{}", g.sm_count),
                 fmt::format("{:.1f}", g.nvlink_bytes_per_s / 1e9)});
  }
  TextTable beds({"cluster", "GPUs", "description"});
  for (const auto& n : TestbedNames()) {
    Cluster c = LoadCluster(n);
    beds.AddRow({n, fmt::format("{}", c.num_gpus()), c.description});
  }
  return gpus.Render() + "\nAny GPU:NODESxPER_NODE (e.g. h800:8x8) gives that GPU's typical server.\n\n" +
         beds.Render();
}

}  // namespace loom
