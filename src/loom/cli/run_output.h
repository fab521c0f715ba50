// What `loom run` prints: the run's losses, step times, memory and node
// events, as text or JSON, with the simulator's prediction beside it under
// --compare. In cli/ because it reads the runtime's RunResult and only cli/
// includes runtime/ (a library of its own, built only with libtorch; see
// docs/architecture.md); the comparison tables are report/run_vs_simulation.h's.
#pragma once

#ifdef LOOM_HAVE_RUNTIME

#include <nlohmann/json.hpp>

#include <string>

#include "loom/plan/plan.h"
#include "loom/runtime/run.h"
#include "loom/sim/plan_run.h"

namespace loom::cli {

// What a run's output needs besides the RunResult.
struct RunOutputContext {
  std::string label;             // what ran: the plan file, "oobleck f=F" or the layout
  const Plan* plan = nullptr;    // the plan that ran last
  Device device = Device::kCpu;  // what the workers computed on (--device)
  std::string resume;            // --resume
  bool fault_tolerant = false;   // the run had fault tolerance on (JSON lists its events)
  // --compare: the simulator's prediction of the last step, priced by `cost_model`; null without --compare.
  const PlanRun* predicted = nullptr;
  std::string cost_model;
};

// `loom run --json`: losses, step times, parameters' sums, memory, the node
// events (fault-tolerant runs) and, with --compare, the prediction's times and memory.
nlohmann::json RunJson(const RunResult& r, const RunOutputContext& context);

// `loom run`'s text: a summary line, the workers' notes, the node events, a
// line per step and, with --compare, the prediction beside what ran.
std::string FormatRun(const RunResult& r, const RunOutputContext& context);

}  // namespace loom::cli

#endif  // LOOM_HAVE_RUNTIME
