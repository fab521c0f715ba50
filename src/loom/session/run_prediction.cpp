#include "loom/session/run_prediction.h"

namespace loom {

PlanRun PredictRunStep(const Model& model, const Cluster& cluster, const Workload& workload, const Plan& plan,
                       const Batch& batch, const IterationSchedule* schedule) {
  return RunPlan(model, cluster, workload, plan, batch, schedule);
}

}  // namespace loom
