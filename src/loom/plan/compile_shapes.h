// The per-shape compilers behind CompilePlan (plan/compile_plan.h); internal.
// Each gets the validated plan and the samples of every global microbatch
// (`global_mbs`; empty for plans whose templates run different microbatch
// counts) and fills `out`, whose strategy, group sizes and sample count are set.
#pragma once

#include <vector>

#include "loom/plan/compile_plan.h"

namespace loom {

// `options` (CompileOptions): with fold_replicas, a plan whose replicas are
// independent copies (FoldableReplicas) compiles `replicated`, like
// CompilePipeline's; only_replica keeps one replica's contents.
void CompilePipeline(const Model& model, const Plan& plan, const IterationSchedule* it,
                     const std::vector<std::vector<int>>& global_mbs, ExecutionPlan& out,
                     const CompileOptions& options);
void CompileUnits(const Model& model, const Plan& plan, const IterationSchedule* it,
                  const std::vector<std::vector<int>>& global_mbs, ExecutionPlan& out, const CompileOptions& options);
// Whether every unit has one template and the same replica count, a GPU
// group is used by one replica index only (units may take turns on it) and
// the batch is cut evenly (no regrouped or per-replica samples, no explicit
// orders): replica d of each unit then feeds and waits only for replica d of
// the others.
bool FoldableReplicas(const Plan& plan, const IterationSchedule* it);
void CompileWoven(const Model& model, const Plan& plan, const Batch& batch, const IterationSchedule& it,
                  ExecutionPlan& out);

// [lo, hi) as a list: the samples of a contiguous run.
std::vector<int> Range(int lo, int hi);

// Adds the data-parallel groups: stages holding the same layers of a unit in
// different replicas sync with each other (one group per unit and template stage
// set; replicated plans: the stage's replicas across the ranks' copies). A unit
// of several templates also gets its layer segments (GroupKind::kLayerSegment),
// which its stages' gradients sync over instead.
void AddDataParallelGroups(ExecutionPlan& out, const Plan& plan, const Model& model);

}  // namespace loom
