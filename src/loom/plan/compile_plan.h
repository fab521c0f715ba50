// CompilePlan turns a Plan, one batch and optionally the batch's
// IterationSchedule into the ExecutionPlan every later step consumes
// (docs/plan-format.md, "Execution"). One file per plan shape, in the manner of
// DuckDB's physical-plan generators:
//   compile_pipeline.cpp  one unit, one template: a Megatron-style pipeline whose
//                         ranks stand for every data-parallel replica;
//   compile_units.cpp     several units or templates: every replica of every unit
//                         flattened into one stage DAG (brokers, temporal phases,
//                         heterogeneous templates);
//   compile_woven.cpp     PipeWeaver's per-batch pipeline: per-module
//                         sub-microbatches, explicit rank orders, per-layer
//                         recomputation.
#pragma once

#include "loom/data/sample.h"
#include "loom/plan/execution_plan.h"
#include "loom/plan/plan.h"
#include "loom/spec/cluster.h"
#include "loom/spec/model.h"
#include "loom/spec/workload.h"

namespace loom {

// Gradient buckets per stage (Megatron-LM's overlapped gradient reduce).
inline constexpr int kGradientBuckets = 4;

struct CompileOptions {
  // Compile a multi-unit plan whose replicas are independent copies of one
  // replica's DAG (equal replica counts, each GPU group one replica's, samples
  // cut evenly) as a `replicated` plan: one replica's ranks, every replica's
  // contents. The simulator then gives the same iteration time and peaks on
  // a schedule dp times smaller; searches use it. Off, every replica is its
  // own ranks, as the runtime, the exporters and the timeline want.
  bool fold_replicas = false;
  // >= 0: a replicated plan (one pipeline, or folded) carries the contents of
  // this replica alone (ExecutionPlan::replicas has one entry): what a
  // search's lower bound prices, without building every replica's
  // microbatches. Ignored by plans that are not replicated.
  int only_replica = -1;
};

// Throws loom::Error when the plan is invalid (every violation listed) or the
// iteration schedule does not fit it (naming the field).
ExecutionPlan CompilePlan(const Model& model, const Cluster& cluster, const Workload& workload, const Plan& plan,
                          const Batch& batch, const IterationSchedule* iteration = nullptr,
                          CompileOptions options = {});

// Stage `spec` of template `pipeline` of unit `unit`, run by the unit's replica
// `replica`: every field but dp_group (CompilePlan assigns groups).
ExecStage StageOf(const Model& model, const Plan& plan, int unit, int pipeline, int replica, const StageSpec& spec);
// The ranks of one replica of template `pipeline` of `unit`, starting at GPU
// group `first_group` (each spans PipelineSpec::span(r) groups).
std::vector<ExecRank> TemplateRanks(const Plan& plan, int unit, int pipeline, int replica, int first_group,
                                    const std::string& name);

// What microbatch pieces stand for: the whole sample, or one item of it.
Sample PieceSample(const Batch& batch, const SamplePiece& piece);
// Images + videos + audios of a sample (the items it can be split into).
int NumItems(const Sample& sample);

// Splits `items` into `parts` contiguous slices of near-equal size: slice d is
// [floor(d n / parts), floor((d + 1) n / parts)). This is also how a broker
// splits a microbatch whose samples do not divide by the consumer's DP degree
// (docs/plan-format.md).
std::vector<std::vector<int>> SplitEven(const std::vector<int>& items, int parts);
// Part d of SplitEven(items, parts) alone.
std::vector<int> SplitEvenPart(const std::vector<int>& items, int parts, int d);

// "vision[0:16]+projector[0:1]".
std::string StageLabel(const StageSpec& stage);

// Whether a module's tokens come only from images, clips or audio (directly or
// through projectors): its work splits item by item.
bool ItemDrivenModule(const Model& model, int module);

// The edge between neighbouring stages whose sub-microbatches belong to the
// global microbatches `producer_mbs` / `consumer_mbs` (non-decreasing): one to
// one when they are cut alike, else many to many inside each global
// microbatch (every consumer sub-microbatch of k reads every producer
// sub-microbatch of k and sends each its gradient).
StageEdge WovenEdge(int from, int to, const std::vector<int>& producer_mbs, const std::vector<int>& consumer_mbs);

// The woven schedule's sub-microbatch counts per module (1 where absent) and,
// per stage of the plan's template, the global microbatch of each of its
// sub-microbatches.
std::vector<std::vector<int>> WovenStageMicrobatches(const Plan& plan, const IterationSchedule& it);

}  // namespace loom
