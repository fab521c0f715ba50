// Oobleck (seed 004, chapter 2): pipeline templates that survive f failures.
// The planner (§2.4): template node counts n0 .. N - f n0 (template_sizes.h),
// one template per count by divide and conquer (template_planner.h), every
// instantiation of the cluster's nodes with at least f + 1 pipelines
// (instantiation.h, Eq. 2.5), the batch distributed by Eq. 2.6, and the
// instantiations ranked by their critical path; the simulator judges the
// best few. The plan is one unit whose pipeline templates differ (the plan
// format's heterogeneous templates: rank_groups give each stage's GPUs, which
// share each microbatch's sequences, as Oobleck's FSDP stages split the data);
// gradients synchronise layer by layer across them (Fig. 2.9).
//
// Choices where the thesis is silent (docs/strategies.md):
//   - n0: the model's training state (weights, gradients, AdamW states at
//     the workload's precision, no sharding) over 80% of a node's memory,
//     rounded up; a stage's GPUs keep whole copies of its layers.
//   - F_{l,d} + B_{l,d}: the cost model's forward and backward of layer l on
//     a microbatch of b samples split over d GPUs (whole sequences each;
//     infinite for d > b, where some GPU would get no sample).
//   - b: every power of two dividing B up to a node's GPUs or B / (4 x
//     GPUs), whichever is larger (a stage on d GPUs needs b >= d; smaller b
//     fills pipelines better, larger runs each kernel more efficiently), each
//     planned at recomputation none and full; all instantiations ranked.
//   - Memory: a stage's state (ZeRO-1 over its GPUs) plus its 1F1B
//     in-flight microbatches' activations within 90% of a GPU
//     (template_planner.h); the simulator judges the plan's real peak.
//   - Templates above L nodes do not exist (a stage holds a layer at least);
//     the sizes stop at min(L, N - f n0).
//   - An instantiation's time: the slowest pipeline's critical path at its
//     N_b; Eq. 2.6's T_j is a template's slowest stage (what each extra
//     microbatch costs in 1F1B's steady phase).
#pragma once

#include <vector>

#include "loom/strategies/oobleck/instantiation.h"
#include "loom/strategies/oobleck/template_planner.h"
#include "loom/strategies/oobleck/template_sizes.h"
#include "loom/strategies/strategy.h"

namespace loom {

struct OobleckOptions {
  int fault_tolerance = 0;     // f
  int microbatch_samples = 0;  // b; 0: the rule above
  int simulated = 3;           // instantiations the simulator judges
};

struct OobleckSolution {
  oobleck::TemplateSizes sizes;
  std::vector<oobleck::PipelineTemplate> templates;  // one per size
  std::vector<int> instantiation;                    // x: pipelines per template
  oobleck::BatchDistribution batch;
  int microbatch_samples = 1;
  Recompute recompute = Recompute::kNone;  // the planner's times and memory assumed it
  double estimated_s = 0;                  // the slowest pipeline's critical path
  int instantiations = 0;                  // feasible instantiations ranked
  Plan plan;
};

// n0 for the cluster's nodes (the rule above).
int OobleckMinNodes(const StrategyContext& ctx);
// F + B per layer (flattened over the modules) on 1 .. M GPUs, microbatches
// of b samples at recomputation r; with `memory`, what each layer keeps per GPU.
oobleck::LayerCosts OobleckLayerCosts(const StrategyContext& ctx, int microbatch_samples, Recompute recompute,
                                      oobleck::LayerMemory* memory = nullptr);
// The instantiations, best estimate first (up to options.simulated), each
// with its plan. Throws loom::Error naming why none exists.
std::vector<OobleckSolution> SolveOobleck(const StrategyContext& ctx, const OobleckOptions& options);

// The plan of sol's instantiation and batch distribution on ctx.cluster:
// larger templates first, each pipeline on consecutive whole nodes.
Plan BuildOobleckPlan(const StrategyContext& ctx, const OobleckSolution& sol);

StrategyResult OobleckStrategy(const StrategyContext& ctx);

}  // namespace loom
