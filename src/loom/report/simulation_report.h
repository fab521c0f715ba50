// Terminal output of `loom simulate`: the configuration, one row per pipeline
// stage (what it holds, mean times, activation memory), and the metrics.
#pragma once

#include <string>

#include "loom/plan/plan.h"
#include "loom/sim/plan_run.h"
#include "loom/spec/model.h"
#include "loom/spec/workload.h"

namespace loom {

// `header` says what was simulated ("tp 4 pp 2 dp 1 ...", or the plan file).
std::string FormatPlanRun(const PlanRun& run, const Model& model, const Workload& workload, const std::string& header);

}  // namespace loom
