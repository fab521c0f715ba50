#include "loom/session/plan_file_replay.h"

#include <fmt/format.h>

#include <optional>
#include <utility>

#include "loom/data/sample_source.h"
#include "loom/error.h"
#include "loom/plan/plan_json.h"
#include "loom/plan/validate_plan.h"
#include "loom/session/training_session.h"
#include "loom/strategies/registry.h"
#include "loom/strategies/strategy.h"

namespace loom {

bool HasRecordedSchedules(const PlanFile& file) {
  for (const RecordedBatch& b : file.batches) {
    if (b.schedule) return true;
  }
  return false;
}

void CheckPlanIsFor(const Plan& plan, const Model& model, const Cluster& cluster, const Workload& workload,
                    const std::string& path, bool recorded_schedules) {
  ValidatePlan(plan, model, cluster, workload, path);
  if (!plan.model.empty() && plan.model != model.name) {
    throw Error(fmt::format("{}: the plan was made for model '{}', not '{}'", path, plan.model, model.name));
  }
  if (!plan.cluster.empty() && plan.cluster != cluster.name) {
    throw Error(fmt::format("{}: the plan was made for cluster '{}', not '{}'; pass --cluster {}", path, plan.cluster,
                            cluster.name, plan.cluster));
  }
  if (!plan.workload.empty() && plan.workload != workload.name) {
    throw Error(fmt::format("{}: the plan was made for workload '{}', not '{}'; pass --workload {}", path,
                            plan.workload, workload.name, plan.workload));
  }
  if (!plan.made_for) return;  // a file written before plans recorded it
  const Plan::MadeFor& m = *plan.made_for;
  const auto differs = [&](const char* what, const std::string& made, const std::string& now, const char* flag) {
    throw Error(fmt::format("{}: the plan was made for {} {}, not {}; pass {} {} or make a plan for this one", path,
                            what, made, now, flag, made));
  };
  if (m.precision != PrecisionName(workload.precision)) {
    differs("precision", m.precision, PrecisionName(workload.precision), "--precision");
  }
  if (m.seq_len != workload.source.seq_len) {
    differs("a sequence length of", std::to_string(m.seq_len), std::to_string(workload.source.seq_len), "--seq-len");
  }
  if (m.zero_stage != workload.zero_stage) {
    differs("ZeRO stage", std::to_string(m.zero_stage), std::to_string(workload.zero_stage), "--zero-stage");
  }
  if (recorded_schedules && m.seed != workload.seed) {
    differs("seed", std::to_string(m.seed),
            std::to_string(workload.seed) + " (its batches' schedules place that seed's samples)", "--seed");
  }
}

PlanFileReplay ReplayPlanFile(const Model& model, const Cluster& cluster, const Workload& workload,
                              const std::string& path, const std::string& strategy) {
  PlanFile file = LoadPlanFile(path, strategy);
  CheckPlanIsFor(file.plan, model, cluster, workload, path, HasRecordedSchedules(file));
  if (file.batches.empty()) file.batches.push_back({0, std::nullopt, 0.0});  // a bare plan: batch 0
  PlanFileReplay replay;
  replay.plan = std::move(file.plan);
  const Plan& plan = replay.plan;
  double sum_s = 0;
  for (size_t b = 0; b < file.batches.size(); ++b) {
    const RecordedBatch& recorded = file.batches[b];
    SimOptions options;
    options.record_timelines = b == 0;  // only the first batch is traced, exported and reported
    const Batch batch = DrawBatch(workload, recorded.iteration);
    std::optional<IterationSchedule> own;
    if (!recorded.schedule && FindStrategy(plan.strategy) != nullptr && SchedulesBatches(plan.strategy)) {
      // A plan of a strategy that schedules every batch, with none recorded: its own schedule.
      own = ScheduleBatch(plan.strategy, StrategyContext{model, cluster, workload, batch, {}}, plan, batch,
                          recorded.iteration);
    }
    PlanRun run = ReplayBatch(model, cluster, workload, plan, batch,
                              recorded.schedule ? &*recorded.schedule : (own ? &*own : nullptr), options);
    CheckFits(run, fmt::format("{} batch {}", path, recorded.iteration));
    const double t = run.metrics.iteration_time_s;
    sum_s += t;
    replay.batches.push_back({recorded.iteration,
                              recorded.schedule ? ReplayedSchedule::kRecorded
                                                : (own ? ReplayedSchedule::kStrategy : ReplayedSchedule::kPlan),
                              t, recorded.iteration_time_s});
    if (b == 0) replay.first = std::move(run);
  }
  replay.mean_iteration_time_s = sum_s / static_cast<double>(file.batches.size());
  return replay;
}

}  // namespace loom
