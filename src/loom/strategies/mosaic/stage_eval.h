// Mosaic §3.4 StageEval: the shortest time of one stage (Eq. 4-5), the
// modules of the stage running side by side on the GPU pool. A binary search
// over the candidate latencies (every surface point's); at each target tau a
// feasibility program chooses per module one option (DP degree d, SM quota)
// whose latency is at most tau and places it, so that on every GPU the quotas
// fit the SMs, the modules fit the memory and the host's launch floors (one
// launching thread per GPU, cost/sm_sharing.h) fit tau. The paper solves it
// with CP-SAT; Loom with COIN-OR CBC (docs/dependencies.md), after a first
// fit, a best fit and an exact depth-first search with a node budget, which
// settle every target of the zoo's models without it (10-module OFASys: 0
// CBC calls, 2-3 ms; bench/mosaic_bench.cpp).
//
// Placement (the paper is silent): a module with degree d takes an aligned
// block of d consecutive GPUs (start a multiple of d), Eq. 6's symmetric quota
// on each. Aligned blocks keep DP groups inside nodes and are what Loom's plan
// expresses (a unit occupies a run of GPU groups); on powers of two they lose
// nothing a buddy allocator would not.
//
// Interference (Eq. 7-8): the program filters on the surfaces' own latencies;
// the chosen allocation is then rectified with the slowdown of its
// co-located modules, and the stage time is the rectified maximum (notes/mosaic.md
// option 1). With a profile whose Eq. 8 terms are zero only the host floor acts.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <vector>

#include "loom/strategies/mosaic/scaling_surface.h"

namespace loom::mosaic {

struct Placement {
  int module = 0;        // index into the surfaces
  int dp = 1;            // slots
  int pp = 1;            // the option's SurfacePoint::pp
  int sms = 0;           // per GPU
  int first_gpu = 0;     // GPUs first_gpu .. first_gpu + dp - 1
  double latency_s = 0;  // rectified
};

struct StageResult {
  double time_s = std::numeric_limits<double>::infinity();    // infinite: the modules cannot share the pool
  double target_s = std::numeric_limits<double>::infinity();  // the smallest feasible target (before rectification)
  std::vector<Placement> placements;
  bool feasible() const { return time_s < std::numeric_limits<double>::infinity(); }
};

struct StageEvalOptions {
  bool cache = true;           // reuse results per module set (bitmask; Mosaic §4)
  bool greedy_first = true;    // try a first fit and a best fit first
  bool exact_search = true;    // then a depth-first search (node budget); off: CBC decides every target
  bool interference = true;    // rectify with Eq. 7-8 and the host floor
  bool additive_only = false;  // Eq. 8 without its product term (the ablation)
};

// Evaluates stages over one model's surfaces; caches by module bitmask.
// Not thread-safe (the cache); one evaluator per search.
class StageEvaluator {
 public:
  StageEvaluator(const std::vector<ModuleSurface>& surfaces, int gpus, double mem_bytes_per_gpu, SmPartitionRules rules,
                 SmSharing sharing, StageEvalOptions options = {});

  // `modules`: indices into the surfaces. REQUIRES: at most 64 modules.
  // `lower_bound_s`: a target known infeasible below it (a subset's
  // target_s: adding modules never lowers it), where the search starts.
  StageResult Evaluate(const std::vector<int>& modules, double lower_bound_s = 0);
  // Whether some option of every module is faster than `bound_s` (the
  // necessary condition EarlyPrune tests; Mosaic §3.4).
  bool AllCanBeat(const std::vector<int>& modules, double bound_s) const;
  // Rectified stage time of a given allocation (Eq. 7-8 with the host floor).
  double Rectify(std::vector<Placement>* placements) const;

  // Memory every module keeps on each GPU when spread over all of them (its
  // weights, gradients and optimizer share at the largest DP, and activations):
  // modules stay resident across stages (Mosaic §1), and with forwards of every
  // stage before the backwards their activations are alive together, so a
  // stage gets the GPU's memory less the other modules' reserve (a heuristic:
  // the simulator checks the plan's real peak).
  void ReserveOthers(bool on) { reserve_others_ = on; }
  // Exact cross-stage coupling (mapping_memory.h): on each GPU g the stage's
  // modules get the memory less resident_bytes[g], what the other stages'
  // modules keep there, and each keeps its activations as GPipe does
  // (`holds_all`: a stage before the last keeps all m microbatches until its
  // backward) or as 1F1B does (the last stage; SurfacePoint::mem_bytes).
  // Replaces ReserveOthers' estimate and bypasses the cache (a result then
  // depends on where the other stages sit). An empty vector switches it off.
  void SetResident(std::vector<double> resident_bytes, bool holds_all);

  int evaluations() const { return evaluations_; }  // Evaluate calls that were not cached
  int milp_solves() const { return milp_solves_; }

 private:
  bool Feasible(const std::vector<int>& modules, double tau, std::vector<Placement>* out);
  // A point's memory per GPU as SetResident's stage keeps its activations.
  double OptionMem(const SurfacePoint& p) const { return holds_all_ ? p.held_mem_bytes : p.mem_bytes; }

  // Set at construction.
  const std::vector<ModuleSurface>& surfaces_;
  int gpus_;
  double mem_bytes_;
  SmPartitionRules rules_;
  SmSharing sharing_;
  StageEvalOptions options_;
  // Mutated by Evaluate.
  std::map<uint64_t, StageResult> cache_;
  double cap_ = 0;            // the most memory any GPU leaves to the stage being evaluated
  std::vector<double> caps_;  // per GPU (all cap_ without SetResident)
  bool reserve_others_ = true;
  std::vector<double> resident_;  // SetResident's; empty: off
  bool holds_all_ = false;
  int evaluations_ = 0;
  int milp_solves_ = 0;
};

}  // namespace loom::mosaic
