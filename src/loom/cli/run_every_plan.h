// `loom plan --run`: every strategy's plan run on this machine, measured
// beside its simulation. In cli/ because it needs the runtime (runtime/run.h),
// which comes after session/ and report/ in the flow; the table itself is
// report/run_vs_simulation.h's.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "loom/session/compare_strategies.h"
#include "loom/spec/cluster.h"
#include "loom/spec/model.h"
#include "loom/spec/workload.h"

namespace loom::cli {

#ifdef LOOM_HAVE_RUNTIME
// Runs each strategy's plan of `cmp` for `steps` steps, each batch with the
// schedule the strategy gave it; returns the table of measured beside
// simulated iteration times (means over steps 1.., step 0 warming up, against
// the simulation of the same batches) and of speedups over megatron. A plan
// the runtime cannot run is listed as not run; the others still run. Adds
// each run to `json` (when it is an object) as strategies[i].measured.
// REQUIRES: cmp kept its batches and simulated at least `steps` of them.
std::string RunEveryPlan(const Model& model, const Cluster& cluster, const Workload& workload, const Comparison& cmp,
                         int steps, nlohmann::json& json);
#endif

}  // namespace loom::cli
