// Terminal output of `loom simulate`: the configuration, one row per pipeline
// stage (what it holds, mean times, activation memory), and the metrics.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "loom/plan/plan.h"
#include "loom/sim/plan_run.h"
#include "loom/spec/model.h"
#include "loom/spec/workload.h"

namespace loom {

// `header` says what was simulated ("tp 4 pp 2 dp 1 ...", or the plan file).
// `loom simulate --json`: {"iteration_time_s", "mfu", "bubble_ratio",
// "peak_mem_bytes", "throughput_samples_per_s"} (docs/cli.md).
nlohmann::json PlanMetricsJson(const PlanMetrics& metrics);
std::string FormatPlanRun(const PlanRun& run, const Model& model, const Workload& workload, const std::string& header);

}  // namespace loom
