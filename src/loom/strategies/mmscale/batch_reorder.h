// MMScale's per-batch data-aware reordering (paper §5) turned into an
// IterationSchedule for an MMScale plan: intra-microbatch reordering spreads
// the batch over the first unit's replicas by predicted encoder + generator
// time (not raw token counts); each replica's samples are cut into balanced
// microbatches; inter-microbatch reordering orders each replica's microbatches
// for its pipeline (encoder stages, then backbone and generator stages with
// their predicted times). docs/strategies.md, "mmscale".
#pragma once

#include <cstdint>

#include "loom/data/sample.h"
#include "loom/plan/plan.h"
#include "loom/spec/cluster.h"
#include "loom/spec/model.h"
#include "loom/spec/workload.h"

namespace loom {

// The batch in its loader order: global microbatch k holds samples
// [k G / m, (k + 1) G / m).
IterationSchedule InputOrder(const Plan& plan, int64_t iteration);

// Intra-microbatch reordering, and inter-microbatch reordering when `inter`.
// Throws loom::Error when the plan's units do not run a common microbatch count.
IterationSchedule ReorderBatch(const Model& model, const Cluster& cluster, const Plan& plan, const Batch& batch,
                               int64_t iteration, bool inter);

// The schedule MMScale trains the batch with: of the input order, intra only
// and intra + inter, the one the simulator finds fastest (so reordering is
// never worse than the input order on the simulator's own evaluation).
IterationSchedule MmscaleScheduleBatch(const Model& model, const Cluster& cluster, const Workload& workload,
                                       const Plan& plan, const Batch& batch, int64_t iteration);

}  // namespace loom
