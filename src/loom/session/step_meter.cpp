#include "loom/session/step_meter.h"

#include "loom/sim/plan_run.h"
#include "loom/spec/gpu.h"

namespace loom {

StepMeter::StepMeter(const Model& model, const Cluster& cluster, const Workload& workload, const Plan& plan,
                     const std::vector<std::optional<IterationSchedule>>& schedules)
    : model_(model),
      cluster_(cluster),
      workload_(workload),
      plan_(plan),
      schedules_(schedules),
      source_(WorkloadSource(workload)) {}

StepWork StepMeter::At(int step) const {
  const Batch batch = source_->Draw(workload_.global_batch, workload_.seed, step);
  const IterationSchedule* schedule =
      step < static_cast<int>(schedules_.size()) && schedules_[step] ? &*schedules_[step] : nullptr;
  const PlanRun run = RunPlan(model_, cluster_, workload_, plan_, batch, schedule);
  return {run.costs.model_flops, run.costs.tokens};
}

double StepMeter::PeakFlopsPerSecond() const {
  return cluster_.num_gpus() * PeakFlops(cluster_.gpu, workload_.precision);
}

}  // namespace loom
