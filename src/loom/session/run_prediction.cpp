#include "loom/session/run_prediction.h"

namespace loom {

PlanRun PredictRunStep(const Model& model, const Cluster& cluster, const Workload& workload, const Plan& plan,
                       const Batch& batch, const IterationSchedule* schedule) {
  Workload as_run = workload;
  as_run.precision = Precision::kFp32;
  return RunPlan(model, cluster, as_run, plan, batch, schedule);
}

}  // namespace loom
