#include "loom/runtime/fault_tolerant_run.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>

#include "loom/error.h"
#include "loom/plan/plan_json.h"
#include "loom/runtime/generation_controller.h"
#include "loom/runtime/worker.h"
#include "loom/weights/run_checkpoint.h"

namespace loom::runtime {

std::vector<std::string> UnlistedTrainableLayers(const Model& model, const std::vector<std::string>& layers) {
  std::vector<std::string> out;
  for (const auto& mod : model.modules) {
    for (size_t l = 0; l < mod.layers.size(); ++l) {
      auto listed = [&](size_t layer) {
        return std::find(layers.begin(), layers.end(), fmt::format("{}_{}", mod.name, layer)) != layers.end();
      };
      const bool tied_head = mod.layers[l].kind == LayerKind::kLmHead && mod.layers[l].tied;
      if (!mod.layers[l].frozen && !listed(l) && !(tied_head && listed(0))) {
        out.push_back(fmt::format("{}_{}", mod.name, l));
      }
    }
  }
  return out;
}

RunResult RunFaultTolerant(const Model& model, const Cluster& cluster, const Workload& workload, const Plan& plan,
                           const std::vector<std::optional<IterationSchedule>>& schedules, const RunOptions& options,
                           const Replanner& replanner) {
  options.Validate();
  // The checkpoint to resume was checked (run.cpp CheckTrainingCheckpoints).
  const int first_step = options.resume_checkpoint.empty()
                             ? 0
                             : weights::RunCheckpointReader(options.resume_checkpoint).manifest().steps_done;
  for (const auto& k : options.kills) {
    if (k.step < 0 || k.step >= options.steps || k.after_actions < 0 || k.process < 0) {
      throw Error(fmt::format("{} {}:{}:{}: valid: a process >= 0, a step in 0..{}, actions >= 0",
                              k.hang ? "--hang" : "--kill", k.process, k.step, k.after_actions, options.steps - 1));
    }
  }
  for (const auto& j : options.rejoins) {
    if (j.node < 0 || j.node >= cluster.nodes || j.step < 1 || j.step >= options.steps) {
      throw Error(fmt::format("--rejoin {}:{}: valid: a node in 0..{} and a step in 1..{}", j.node, j.step,
                              cluster.nodes - 1, options.steps - 1));
    }
  }
  GenerationController controller(model, cluster, workload, plan, schedules, options, replanner, first_step);
  return controller.Run();
}

}  // namespace loom::runtime
