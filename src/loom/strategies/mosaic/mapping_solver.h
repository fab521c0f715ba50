// Mosaic §3.4, Alg. 1: the temporal-spatial mapping. Stages run one after
// another (Eq. 1: iteration time = the sum of stage times); modules with a
// dependency go to different stages, the consumer's later (Eq. 3).
//   - SolveGahc: greedy agglomerative clustering. Start from one stage per
//     module in topological order; each round evaluates every legal pair and
//     applies the merge of largest positive gain
//     Delta = T(Sx) + T(Sy) - T(Sx u Sy) (Eq. 9); stops when none gains.
//     A pair is legal when no directed path joins the two stages in the stage
//     graph (not only a direct edge: with a->b, c->d and a stage {b, c},
//     merging {a} and {d} would close a cycle); after a merge the stages are
//     re-ordered topologically. EarlyPrune skips a pair when some module has
//     no option faster than T(Sx) + T(Sy) - Delta_best.
//   - SolveExhaustive: every partition of the modules into legal stages
//     (Bell(n) of them; tests and the optimality bench, n <= ~10).
//   - Refinement (Loom's, switchable): after the last merge, single modules
//     move to another stage or a stage of their own, or two modules of two
//     stages swap, while the sum shrinks. GAHC alone missed the optimum on 1
//     of 40 random 2-4 module instances.
// Ties: pairs in (x, y) order of the current stage list, first best kept;
// deterministic.
#pragma once

#include <vector>

#include "loom/spec/model.h"
#include "loom/strategies/mosaic/stage_eval.h"

namespace loom::mosaic {

struct Stage {
  std::vector<int> modules;  // increasing module indices
  StageResult result;
};

struct Mapping {
  std::vector<Stage> stages;  // in execution order
  double time_s = 0;          // sum of stage times (Eq. 1)
  int pairs_visited = 0;
  int pruned = 0;
  int refinements = 0;  // single-module moves after the merging
  bool feasible() const;
};

struct MappingOptions {
  bool early_prune = true;
  bool refine = true;  // single-module moves after GAHC stops (Loom's addition; off: the paper's Alg. 1)
};

// Module dependencies of the model: deps[m] = the modules m reads (Module::inputs).
std::vector<std::vector<int>> ModuleDeps(const Model& model);

Mapping SolveGahc(const std::vector<std::vector<int>>& deps, StageEvaluator& eval, const MappingOptions& options = {});
Mapping SolveExhaustive(const std::vector<std::vector<int>>& deps, StageEvaluator& eval);

}  // namespace loom::mosaic
