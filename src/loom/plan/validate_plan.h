// The rules every Plan must keep (docs/plan-format.md), checked against the
// model, cluster and workload it is for. Every violated rule is reported, each
// with the numbers that break it; memory per GPU is checked after simulation
// (sim/plan_run.h), since it depends on the schedule.
#pragma once

#include <string>
#include <vector>

#include "loom/plan/plan.h"
#include "loom/spec/cluster.h"
#include "loom/spec/model.h"
#include "loom/spec/workload.h"

namespace loom {

// One line per violated rule; empty when the plan is valid.
std::vector<std::string> PlanViolations(const Plan& plan, const Model& model, const Cluster& cluster,
                                        const Workload& workload);
// Throws loom::Error listing every violation, prefixed by `where` (a file or "plan megatron").
void ValidatePlan(const Plan& plan, const Model& model, const Cluster& cluster, const Workload& workload,
                  const std::string& where = "plan");

// Whether all pipelines of all units run the same number of microbatches
// (then global microbatch k is split across each unit's replicas).
bool UniformMicrobatches(const Plan& plan);

// Units each unit's modules read from (unit-level DAG), by index.
std::vector<std::vector<int>> UnitInputs(const Plan& plan, const Model& model);

}  // namespace loom
