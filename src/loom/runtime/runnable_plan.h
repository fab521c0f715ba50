// "Can the runtime run this plan?", in one place: the launcher checks it
// before starting workers, and each worker compiles its steps through it.
// Torch-free, the .cpp too: which layers the runtime can build is
// runnable_layers.h's CheckRunnable, and the packing it checks is packing.h's.
#pragma once

#include <map>
#include <string>
#include <utility>

#include "loom/data/sample.h"
#include "loom/plan/execution_plan.h"
#include "loom/plan/plan.h"
#include "loom/spec/cluster.h"
#include "loom/spec/model.h"
#include "loom/spec/workload.h"

namespace loom::runtime {

// The ExecutionPlan of `batch`, checked for what the runtime supports (throws
// loom::Error naming what is missing). Shared by the launcher's check and the workers.
ExecutionPlan CompileForRuntime(const Model& model, const Cluster& cluster, const Workload& workload, const Plan& plan,
                                const Batch& batch, const IterationSchedule* it = nullptr);

// The loss module's first and last stage in each (unit, replica) of `exec`
// (-1 where the replica holds no such stage): where a tied head's copy of the
// embedding and the embedding itself live (optimizer_steps.h MakeTies).
struct LossModuleEnds {
  int embedding_stage = -1, head_stage = -1;
};
std::map<std::pair<int, int>, LossModuleEnds> LossModuleEndsOf(const Model& model, const ExecutionPlan& exec);

// Whether the runtime runs a stage's sequence parallelism: where its plan
// asks for it, with TP, and not beside context parallelism.
inline bool RunsSequenceParallelism(const ExecStage& st) { return st.sequence_parallel && st.tp > 1 && st.cp == 1; }

// Sequence parallelism together with context parallelism is not run yet
// (docs/runtime.md "Not built yet"; RunsSequenceParallelism's rule, applied
// to the plan so that predictions match): clears `sequence_parallel` of each unit
// with tp > 1 and cp > 1 that sets it (Megatron's default, which plans
// keep), so that the plan a run predicts is the one it runs: its norms' and
// residual rows whole on every TP rank of a CP rank. Returns a note naming
// the units, or "" where none needed it.
std::string DropSequenceParallelism(Plan& plan);

// Why a fault-tolerant run's survivors could not hand `plan`'s state over
// whole after a failure (Oobleck §2.5's copy: every process holds whole layers
// with their AdamW state), or "" when they can: one unit, no TP or CP,
// zero_stage 0, no tied head, not fp16 (its loss scale is carried in
// checkpoints only). A plan that cannot is recovered by restoring the last
// checkpoint instead (runtime/generation_controller.h).
std::string WhyNoWholeLayers(const Model& model, const Plan& plan, Precision precision);

}  // namespace loom::runtime
