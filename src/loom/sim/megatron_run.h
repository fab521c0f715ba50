// One call from specs to metrics for the Megatron-LM layout: draw the batch,
// price it, simulate, check memory. What `loom simulate` runs.
#pragma once

#include <string>
#include <vector>

#include "loom/sim/metrics.h"

namespace loom {

struct MegatronRun {
  MegatronSimulation sim;
  SimResult result;
  IterationMetrics metrics;
  std::vector<std::string> stage_labels;
  std::vector<std::string> gpu_names;  // per simulated rank
};

// Throws loom::Error for an invalid configuration or a plan that does not fit in memory.
MegatronRun RunMegatron(const Model& model, const Cluster& cluster, const Workload& workload,
                        const ParallelConfig& config, int64_t iteration = 0);

}  // namespace loom
