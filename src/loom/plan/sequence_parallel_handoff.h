// How a stage hands its output to the next one under Megatron-LM's sequence
// parallelism. Megatron's pipeline sends a stage's output as each TP rank
// holds it after its last layer's reduce-scatter: that rank's rows of the
// sequence, to the same TP rank of the next stage, which starts its first
// layer from them (megatron/core/pipeline_parallel/schedules.py
// get_tensor_shapes: seq_length / tp under sequence_parallel). No rank
// gathers the rows for the send or scatters them again on arrival, so the
// point-to-point bytes, and the output a sender keeps in flight, are 1/tp of
// the whole output's.
//
// Where the two stages do not meet the conditions below (other TP degrees, a
// stage that ends or starts outside a transformer block, several consumers,
// microbatches regrouped between units), the output goes whole, as before.
// One rule for the simulator (the send's bytes, sim/price_execution.cpp) and
// the runtime (the message's rows, runtime/step_executor.cpp), so the two
// cannot disagree.
#pragma once

#include <vector>

#include "loom/plan/execution_plan.h"
#include "loom/spec/model.h"

namespace loom {

// Per stage, whether it hands its output to its one consumer stage as each
// TP rank's sequence rows: both stages run sequence parallelism (TP > 1, no
// CP, no sequence shares) at the same TP degree in the same unit, its only
// edge is one to one and the consumer reads from it alone, and the output is
// the module the two split between them, cut between two transformer layers
// or after the module's token embedding (which Megatron's scatters into the
// sequence split itself), with no earlier module's output crossing beside it.
struct SequenceParallelHandoffs {
  std::vector<bool> out;  // per stage: hands on its TP rank's rows
  std::vector<bool> in;   // per stage: receives its TP rank's rows (its producer's `out`)
};
SequenceParallelHandoffs SequenceParallelHandoffsOf(const Model& model, const ExecutionPlan& exec);

}  // namespace loom
