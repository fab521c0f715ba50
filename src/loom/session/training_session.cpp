#include "loom/session/training_session.h"

#include <fmt/format.h>

#include <chrono>

#include "loom/error.h"

namespace loom {

TrainingSession::TrainingSession(const StrategyContext& ctx, const std::string& strategy, Plan plan)
    : context_(ctx), strategy_(strategy), plan_(std::move(plan)) {
  const StrategyInfo* info = FindStrategy(strategy);
  if (info == nullptr) throw Error(fmt::format("unknown strategy '{}'", strategy));
  if (info->batch_scheduler) scheduler_ = info->batch_scheduler();
}

BatchOutcome TrainingSession::Step(const Batch& batch, int64_t iteration, const SimOptions& options) {
  BatchOutcome out;
  out.iteration = iteration;
  if (scheduler_) {
    const auto t0 = std::chrono::steady_clock::now();
    out.schedule = scheduler_->Schedule(context_, plan_, batch, iteration);
    out.schedule_time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  out.run = ReplayBatch(context_.model, context_.cluster, context_.workload, plan_, batch,
                        out.schedule ? &*out.schedule : nullptr, options);
  return out;
}

PlanRun ReplayBatch(const Model& model, const Cluster& cluster, const Workload& workload, const Plan& plan,
                    const Batch& batch, const IterationSchedule* schedule, const SimOptions& options) {
  return RunPlan(model, cluster, workload, plan, batch, schedule, options);
}

}  // namespace loom
