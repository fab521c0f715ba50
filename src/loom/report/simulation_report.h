// Terminal output of `loom simulate`: the configuration, one row per pipeline
// stage (what it holds, mean times, activation memory), and the metrics.
#pragma once

#include <string>

#include "loom/sim/megatron_run.h"

namespace loom {

std::string FormatMegatronRun(const MegatronRun& run, const Model& model, const Workload& workload,
                              const ParallelConfig& config);

}  // namespace loom
