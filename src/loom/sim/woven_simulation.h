// PipeWeaver's per-batch pipeline (plan shape 5, docs/plan-format.md "Woven
// schedules"): a plan with one unit and one pipeline template whose iteration
// schedule cuts each module's share of a global microbatch into its own number
// of sub-microbatches (PipeWeaver §5 "modality-aware data batching"), orders
// every rank's forward and backward stages explicitly (§6.2) and chooses
// recomputation per layer and sub-microbatch (§6.3).
//
// The stages form a chain in the template's order; a stage's microbatches are
// its module's sub-microbatches, numbered in global-microbatch order. Where
// two neighbouring stages cut a global microbatch differently, the consumer's
// first sub-microbatch of it waits for all the producer's (and the rank order
// keeps the later ones behind it). A module's sub-microbatches are contiguous
// runs of the replica's samples with balanced token counts (min-max
// partition); for modules that see only images, clips or audio (encoders and
// their projectors, ItemDrivenModule) the runs are of items, so a sample's
// images may land in several sub-microbatches. A count above the samples (or
// items) of a slice is an error.
#pragma once

#include <array>
#include <vector>

#include "loom/data/sample.h"
#include "loom/plan/plan.h"
#include "loom/sim/layer_pricing.h"
#include "loom/sim/plan_simulation.h"
#include "loom/spec/cluster.h"
#include "loom/spec/model.h"

namespace loom {

// Per (stage, sub-microbatch), each layer's price under the three
// recomputation choices, indexed by Recompute (replica 0). For layer tuning.
struct LayerOptions {
  std::vector<std::vector<std::vector<std::array<LayerTimes, 3>>>> at;  // [stage][sub-mb][layer in stage][choice]
};

// REQUIRES: `plan` validated, `it.microbatch_samples` checked against the batch
// (BuildPlanSimulation does both, then calls this for a woven schedule), and
// `base` holds what it filled in already (samples, num_groups). Throws
// loom::Error naming the field for a schedule that does not fit the plan.
// Fills `options` when not null.
PlanSimulation BuildWovenSimulation(const Model& model, const Cluster& cluster, const Plan& plan, const Batch& batch,
                                    const IterationSchedule& it, PlanSimulation base, LayerOptions* options = nullptr);

// The edge between neighbouring stages whose sub-microbatches belong to the
// global microbatches `producer_mbs` / `consumer_mbs` (non-decreasing): one to
// one when they are cut alike, else the consumer's first sub-microbatch of
// global microbatch k takes all the producer's of k and the others none.
StageEdge WovenEdge(int from, int to, const std::vector<int>& producer_mbs, const std::vector<int>& consumer_mbs);

// Whether a module's tokens come only from images, clips or audio (directly or
// through projectors): its work splits item by item.
bool ItemDrivenModule(const Model& model, int module);

// The woven schedule's sub-microbatch counts per module (1 where absent) and,
// per stage of the plan's template, the global microbatch of each of its
// sub-microbatches.
std::vector<std::vector<int>> WovenStageMicrobatches(const Plan& plan, const IterationSchedule& it);

}  // namespace loom
