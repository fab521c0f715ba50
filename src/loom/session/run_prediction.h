// The simulator's prediction of one step of `loom run`: what `loom run
// --compare`, --trace and --timeline put beside what ran, and what `loom plan
// --run` compares each strategy's run with.
#pragma once

#include "loom/data/sample.h"
#include "loom/plan/plan.h"
#include "loom/sim/plan_run.h"
#include "loom/spec/cluster.h"
#include "loom/spec/model.h"
#include "loom/spec/workload.h"

namespace loom {

// `plan` compiled for `batch` (with `schedule`, the strategy's schedule of
// that batch; null: the plan's own) and simulated as the runtime runs it, in
// `workload`'s precision (bf16 mixed precision, tf32 or fp32: what the
// runtime computes in). Prices with `cluster`'s cost model. Throws loom::Error for an invalid plan.
PlanRun PredictRunStep(const Model& model, const Cluster& cluster, const Workload& workload, const Plan& plan,
                       const Batch& batch, const IterationSchedule* schedule);

}  // namespace loom
