// Replaying a plan file (`loom simulate --plan`): the plan simulated on every
// batch a `loom plan --json` output recorded (a bare plan: on batch 0), each
// with the schedule it was measured with, so that the replay reproduces the
// recorded iteration times. Also the check that a plan file read by
// `loom simulate` or `loom run` is for the model, cluster and workload given.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/plan/plan.h"
#include "loom/plan/plan_json.h"
#include "loom/sim/plan_run.h"
#include "loom/spec/cluster.h"
#include "loom/spec/model.h"
#include "loom/spec/workload.h"

namespace loom {

// Whether any batch of `file` carries its own recorded schedule.
bool HasRecordedSchedules(const PlanFile& file);

// Throws loom::Error, naming `path`, when `plan` is not for this model (every
// violation listed first, when its shape differs), cluster or workload, or
// was made for another precision, sequence length or ZeRO stage; with
// `recorded_schedules` (the file holds per-batch schedules) also another
// seed, whose batches hold other samples. Each message names the flag to pass.
void CheckPlanIsFor(const Plan& plan, const Model& model, const Cluster& cluster, const Workload& workload,
                    const std::string& path, bool recorded_schedules = false);

// Which schedule a replayed batch ran with.
enum class ReplayedSchedule {
  kPlan,      // the plan's static one
  kRecorded,  // the one the file recorded for this batch
  kStrategy,  // none recorded: the plan's strategy scheduled the batch anew
};

struct ReplayedBatch {
  int64_t iteration = 0;
  ReplayedSchedule schedule = ReplayedSchedule::kPlan;
  double iteration_time_s = 0;
  double recorded_iteration_time_s = 0;  // what the file recorded; 0 when it has none
};

struct PlanFileReplay {
  Plan plan;
  std::vector<ReplayedBatch> batches;  // in the file's order; at least one
  PlanRun first;                       // the first batch's simulation, with timelines recorded
  double mean_iteration_time_s = 0;    // over `batches`
};

// Loads `path` (`strategy`: whose plan in a `loom plan --json` output; empty:
// the best), checks it with CheckPlanIsFor and simulates each of its batches.
// Throws loom::Error for an unreadable or foreign plan, and for a batch that
// does not fit in GPU memory (naming the file and the batch).
PlanFileReplay ReplayPlanFile(const Model& model, const Cluster& cluster, const Workload& workload,
                              const std::string& path, const std::string& strategy);

}  // namespace loom
