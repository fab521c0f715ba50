// A TrainingSession trains one strategy's plan in simulation, batch after
// batch: per batch, the strategy's BatchScheduler (if it has one; created once
// per session so it keeps state across batches: Entrain's carried-over
// samples, Oobleck's re-plans) turns the plan and the batch into an
// IterationSchedule, which is compiled, priced and simulated. What
// `loom plan` measures every strategy with, and what `loom simulate --plan`
// replays. Not thread-safe.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loom/plan/plan.h"
#include "loom/sim/plan_run.h"
#include "loom/strategies/registry.h"

namespace loom {

// One simulated batch: its schedule (strategies that schedule batches), how
// long the strategy took to make it, and the simulation.
struct BatchOutcome {
  int64_t iteration = 0;
  std::optional<IterationSchedule> schedule;
  double schedule_time_s = 0;
  PlanRun run;
};

class TrainingSession {
 public:
  // Throws loom::Error for an unknown strategy.
  TrainingSession(const StrategyContext& context, const std::string& strategy, Plan plan);

  // Schedules (when the strategy does) and simulates `batch` as iteration `iteration`.
  BatchOutcome Step(const Batch& batch, int64_t iteration, const SimOptions& options = {});

  const Plan& plan() const { return plan_; }

 private:
  const StrategyContext& context_;
  std::string strategy_;
  Plan plan_;
  std::unique_ptr<BatchScheduler> scheduler_;  // null: the plan is static
};

// Replays one recorded batch: `schedule` exactly as recorded (null: the plan's
// static schedule).
PlanRun ReplayBatch(const Model& model, const Cluster& cluster, const Workload& workload, const Plan& plan,
                    const Batch& batch, const IterationSchedule* schedule, const SimOptions& options = {});

}  // namespace loom
