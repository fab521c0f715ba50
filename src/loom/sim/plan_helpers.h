// Pieces shared by the two builders that turn a plan into simulator input
// (sim/plan_simulation.cpp for every plan shape, sim/woven_simulation.cpp for
// PipeWeaver's per-batch pipelines): slicing samples, a stage's parameters,
// its data-parallel gradient sync and its label.
#pragma once

#include <string>
#include <vector>

#include <map>

#include "loom/plan/plan.h"
#include "loom/sim/plan_simulation.h"
#include "loom/spec/cluster.h"
#include "loom/spec/model.h"

namespace loom {

// Splits `items` into `parts` contiguous slices of near-equal size: slice d is
// [floor(d n / parts), floor((d + 1) n / parts)). This is also how a broker
// splits a microbatch whose samples do not divide by the consumer's DP degree
// (docs/plan-format.md).
std::vector<std::vector<int>> SplitEven(const std::vector<int>& items, int parts);

// Parameters per GPU of one stage of `unit`: trainable, frozen, and the
// trainable ones replicated over the TP group (modules whose heads do not divide).
struct StageParams {
  double trainable = 0, frozen = 0, replicated = 0;
};
StageParams StageParamsOf(const Model& model, const Unit& unit, const StageSpec& stage);

// Data-parallel gradient sync of one stage's trainable weights, in bf16, over
// D replicas of `unit` in groups of `group_gpus` GPUs.
double GradSyncTime_s(const StageParams& params, int D, const Unit& unit, int group_gpus, const Cluster& cluster);

// "vision[0:16]+projector[0:1]".
std::string StageLabel(const StageSpec& stage);

// Adds one DP replica's costs to a deduplicated simulation: a replica whose
// stage costs equal an earlier one's only raises that one's weight. `seen`
// maps cost signatures to replicas; start it empty per simulation.
void AddReplica(PlanSimulation& sim, PipelineCosts costs, std::map<std::vector<double>, int>& seen);

}  // namespace loom
