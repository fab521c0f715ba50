#include "loom/cli/run_every_plan.h"

#ifdef LOOM_HAVE_RUNTIME

#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <vector>

#include "loom/cost/cost_model.h"
#include "loom/cost/profile.h"
#include "loom/data/sample_source.h"
#include "loom/error.h"
#include "loom/report/run_vs_simulation.h"
#include "loom/runtime/run.h"
#include "loom/strategies/strategy.h"

namespace loom::cli {

std::string RunEveryPlan(const Model& model, const Cluster& cluster, const Workload& workload, const Comparison& cmp,
                         int steps, nlohmann::json& json) {
  std::vector<MeasuredStrategy> rows;
  std::vector<std::string> not_run;
  const Batch representative = DrawBatch(workload, 0);
  for (size_t i = 0; i < cmp.outcomes.size(); ++i) {
    const auto& o = cmp.outcomes[i];
    if (!o.ok()) continue;
    std::cerr << fmt::format("running {} for {} steps...\n", o.name, steps);
    const auto schedules = ScheduleIterations(o.name, StrategyContext{model, cluster, workload, representative, {}},
                                              o.result.plan, o.batches, steps);
    RunOptions options;
    options.steps = steps;
    RunResult r;
    try {
      r = RunLocally(model, cluster, workload, o.result.plan, options, schedules);
    } catch (const loom::Error& e) {  // what the runtime cannot run yet: said, and the others still run
      not_run.push_back(fmt::format("{}: {}", o.name, e.what()));
      continue;
    }
    MeasuredStrategy row{o.name};
    for (int s = 1; s < steps; ++s) {
      double slowest = 0;
      for (const auto& rank : r.step_s) slowest = std::max(slowest, rank[s]);
      row.measured_s += slowest / (steps - 1);
      row.simulated_s += o.iteration_times_s.at(s) / (steps - 1);
    }
    row.last_loss = r.losses.back();
    rows.push_back(row);
    if (json.is_object()) {
      json["strategies"][i]["measured"] = {{"steps", steps},
                                           {"step_s", r.step_s},
                                           {"losses", r.losses},
                                           {"iteration_time_s", row.measured_s},
                                           {"simulated_iteration_time_s", row.simulated_s}};
    }
  }
  return FormatMeasuredStrategies(rows, not_run, steps, CostModelNameFor(CostModelOf(cluster), workload.precision),
                                  workload.precision);
}

}  // namespace loom::cli

#endif  // LOOM_HAVE_RUNTIME
