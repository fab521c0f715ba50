// Mosaic (seed 000): temporal-spatial multiplexing with SM quotas. One unit
// per module; each stage of the mapping (mapping_solver.h) is a temporal
// phase, and inside it every module gets a DP degree, a block of slots and an
// SM fraction of each GPU (sm_fraction = the quota's SMs / the GPU's SMs), so
// several modules share a GPU at once. A slot is one GPU (the paper) or, Loom's
// extension for modules too big for one, 2-8 GPUs of a node over which every
// module is TP-sharded (the plan's group), or 2, 4, ... nodes over which a
// module is pipelined (TP inside each node) with the stages repeated in
// rounds (Plan::phase_rounds). Every mapping is checked against its exact cross-stage memory
// (mapping_memory.h). Variants are the paper's ablations
// (§5.3): the performance model without interference or with its additive
// term only, the solver without caching or early pruning, and SM-quota
// granularities of 30/20/5% (10% is the default).
//
// Spindle's mappings (whole GPUs, a in {0, 1}) are in Mosaic's space, so
// beside GAHC's own mappings the simulator is also handed the ones GAHC
// finds on the whole-GPU points alone (MosaicOptions::whole_gpu_candidates):
// GAHC's objective (Eq. 1, each module's gradient all-reduce counted whole
// in its stage) can prefer a co-located stage that the simulator, which
// overlaps the all-reduce with the backwards after it, finds slower.
#pragma once

#include "loom/strategies/mosaic/mapping_solver.h"
#include "loom/strategies/strategy.h"

namespace loom {

struct MosaicOptions {
  double granularity = 0.1;
  bool whole_gpus = false;  // spindle: every module on whole GPUs
  // Also hand the simulator Spindle's mappings of each slot size (GAHC on
  // the whole-GPU points, with Spindle's evaluator and mapping options, at
  // the first recomputation level that has mappings): Mosaic is then never
  // slower than Spindle wherever Spindle's plan comes from that level (every
  // instance of docs/results/mosaic.md). Off: GAHC's own mappings only (the
  // paper's solver).
  bool whole_gpu_candidates = true;
  // Largest slot (TP degree of every module) tried; 0: a node. 1 is the
  // paper's DP-only Mosaic.
  int max_tp = 0;
  // Share of each GPU's memory the solver fills (Run lowers it when the
  // simulator finds every mapping over the real peak).
  double mem_fraction = 1.0;
  mosaic::StageEvalOptions stage;
  mosaic::MappingOptions mapping;
};

// The mapping (for tests and benches) and the plan built from it.
struct MosaicSolution {
  std::vector<mosaic::ModuleSurface> surfaces;
  mosaic::Mapping mapping;
  int evaluations = 0, milp_solves = 0;
  Recompute recompute = Recompute::kNone;  // of every module
  int tp = 1;                              // GPUs per group: every module's TP
  int pp = 1;                              // groups per slot (SurfaceOptions::pp)
  int microbatches = 1;                    // of every module, one after another
  int rounds = 1;                          // the stages' rounds (Plan::phase_rounds)
  // Found by GAHC on the whole-GPU points alone (Spindle's mapping, handed to
  // the simulator beside GAHC's own; MosaicOptions::whole_gpu_candidates).
  bool whole_gpus_only = false;
  Plan plan;
};
// Per slot size (TP 1, 2, 4, 8 up to a node; slots of several nodes with
// PP) and recomputation level, the mappings that fit at the fewest
// microbatches and rounds (up to three), and with whole_gpu_candidates
// Spindle's too (whole_gpus_only; not repeated where GAHC's own mapping is the
// same), fastest mapping first by the solver's time; throws loom::Error naming
// why none does.
std::vector<MosaicSolution> SolveMosaicSlots(const StrategyContext& ctx, const MosaicOptions& options);
// The fastest of them.
MosaicSolution SolveMosaic(const StrategyContext& ctx, const MosaicOptions& options);

StrategyResult MosaicStrategy(const StrategyContext& ctx);
StrategyResult MosaicNoInterferenceStrategy(const StrategyContext& ctx);
StrategyResult MosaicAdditiveStrategy(const StrategyContext& ctx);
StrategyResult MosaicNoCacheStrategy(const StrategyContext& ctx);
StrategyResult MosaicNoPruneStrategy(const StrategyContext& ctx);
StrategyResult MosaicGranularity30Strategy(const StrategyContext& ctx);
StrategyResult MosaicGranularity20Strategy(const StrategyContext& ctx);
StrategyResult MosaicGranularity5Strategy(const StrategyContext& ctx);
// Spindle (Wang et al., ASPLOS'25) as Mosaic describes it: waves of modules on
// disjoint sets of whole GPUs (a in {0, 1}), each module data parallel on its
// set, waves packed by the same solver. Spindle's slicing of a module into
// finer pieces scheduled in different waves is not modelled yet.
StrategyResult SpindleStrategy(const StrategyContext& ctx);

}  // namespace loom
