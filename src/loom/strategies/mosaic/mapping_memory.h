// Exact cross-stage memory of a Mosaic mapping. StageEval (stage_eval.h)
// judges one stage at a time against an estimate of what the other stages
// keep on each GPU (ReserveOthers); but modules stay resident across stages
// (Mosaic §1) and, with several microbatches, an earlier stage's activations
// live until its backward after the later stages, so the iteration's peak on
// a slot is the sum over every stage of what its placements keep there:
//   state (weights, gradients, optimizer) of every module placed on the slot
//   + a round's microbatches' activations of every module in a stage before
//     the last (GPipe: SurfacePoint::held_mem_bytes) + the in-flight ones of the
//     last stage's modules (1F1B: SurfacePoint::mem_bytes).
// The paper does not couple stages in memory (notes/mosaic.md): its
// edge-grade models fit easily. Loom's large modules do not, so a mapping is
// accepted only when this sum fits, and FitMappingMemory repairs one that does
// not by re-solving each stage against the memory the others leave.
#pragma once

#include <vector>

#include "loom/strategies/mosaic/mapping_solver.h"

namespace loom::mosaic {

// Bytes per slot at the iteration's peak (the sum above); `slots` entries.
std::vector<double> MappingPeakBytes(const Mapping& mapping, const std::vector<ModuleSurface>& surfaces, int slots);

// Whether every slot's peak fits `mem_bytes`.
bool MappingFits(const Mapping& mapping, const std::vector<ModuleSurface>& surfaces, int slots, double mem_bytes);

// Coordinate descent on the stages (first to last, `passes` times): each stage
// re-solved by `eval` with the memory the other stages keep on every slot
// (StageEvaluator::SetResident), kept when it solves. Stops as soon as the
// mapping fits; returns whether it does. The stage partition never changes;
// stage times (and mapping->time_s) may rise. Leaves `eval` as it found it
// (resident memory off).
bool FitMappingMemory(Mapping* mapping, StageEvaluator& eval, const std::vector<ModuleSurface>& surfaces, int slots,
                      double mem_bytes, int passes = 3);

}  // namespace loom::mosaic
