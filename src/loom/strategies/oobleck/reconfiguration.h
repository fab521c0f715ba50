// Oobleck §2.5 (Fig. 2.8, App. A.2): re-instantiating pipelines after nodes
// fail, without a restart. In order, for each pipeline that lost nodes
// (pipelines in index order):
//   1. simple re-instantiation: a template exists for what it has left;
//   2. borrowing: it is below n0, so it takes nodes, one at a time, from the
//      pipeline with the most nodes above n0 (ties: the lowest index) until
//      it has n0; lenders shrink to their own smaller templates;
//   3. merging: nobody can lend, so it merges with the smallest other
//      pipeline (ties: the lowest index); Theorem 2 says the merged count,
//      in [n0, 2·n0), has a template.
// A pipeline that lost every node is gone; if fewer than f + 1 pipelines
// remain, every surviving node is re-instantiated at once (Eq. 2.5: the
// split with at least f + 1 pipelines and the fewest of them, then the
// lexicographically largest template counts; nodes fill the new pipelines in
// their old pipelines' order). Fewer than (f + 1)·n0 nodes is the "cannot
// recover" outcome, which names the nodes left and needed. Node joins go to the
// smallest pipeline while a larger template exists (ties: lowest index).
// Deterministic: every choice above has its tie-break.
#pragma once

#include <string>
#include <vector>

#include "loom/strategies/oobleck/template_sizes.h"

namespace loom::oobleck {

enum class RecoveryStep : int { kNone = 0, kSimple = 1, kBorrow = 2, kMerge = 3, kReinstantiate = 4 };

struct Reconfiguration {
  bool recovered = false;
  std::string outcome;                      // what happened, or why it cannot recover
  std::vector<std::vector<int>> pipelines;  // node ids of each pipeline after it
  std::vector<RecoveryStep> steps;          // one per pipeline that lost nodes, in order
};

// `pipelines`: node ids of each pipeline before the failure (each a template
// size); `failed`: node ids lost at once.
Reconfiguration Reconfigure(const std::vector<std::vector<int>>& pipelines, const std::vector<int>& failed,
                            const TemplateSizes& templates);

// `joined` nodes added to the pipelines: each to the smallest pipeline that
// has a template one node larger; a node none can take stays idle (it is not
// in the result) until the next full instantiation. Never changes the count
// of pipelines unless 1-node templates exist.
std::vector<std::vector<int>> AddNodes(const std::vector<std::vector<int>>& pipelines, const std::vector<int>& joined,
                                       const TemplateSizes& templates);

}  // namespace loom::oobleck
