// Metrics of a simulated iteration (definitions in docs/metrics.md), and the
// memory check that turns a plan that does not fit into a loom::Error.
#pragma once

#include <string>
#include <vector>

#include "loom/sim/megatron_layout.h"
#include "loom/sim/sim_result.h"

namespace loom {

struct IterationMetrics {
  double iteration_time_s = 0;
  double mfu = 0;                 // model FLOPs / (time x GPUs x peak)
  double bubble_ratio = 0;        // idle share of compute streams, replicas weighted
  double peak_mem_bytes = 0;      // the fullest GPU
  double throughput_samples_per_s = 0;
  double throughput_tokens_per_s = 0;
};

IterationMetrics ComputeMetrics(const SimResult& result, const MegatronSimulation& sim, const Cluster& cluster,
                                const Workload& workload, double batch_tokens);

// Throws loom::Error naming the GPU (pipeline rank and its stages), its peak,
// the capacity and by how much it is over, when any simulated rank does not fit.
void CheckMemoryFits(const SimResult& result, const MegatronSimulation& sim, const Cluster& cluster,
                     const std::vector<std::string>& stage_labels);

}  // namespace loom
