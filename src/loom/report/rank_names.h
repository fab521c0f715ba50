// Row names of a simulated plan run's ranks, for its Chrome trace.
#pragma once

#include <string>
#include <vector>

#include "loom/sim/plan_run.h"

namespace loom {

// One name per simulated rank of `run`, replica-major: the rank's name
// (ExecutionPlan::ranks), prefixed "replica R " when the run simulated
// several replicas.
std::vector<std::string> SimulatedRankNames(const PlanRun& run);

}  // namespace loom
