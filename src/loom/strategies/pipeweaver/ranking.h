// PipeWeaver's modality-level ranking (§6.1, Algorithm 1): Monte Carlo tree
// search over the priority order of pipeline segment groups, forward and
// backward ones ordered separately (StageFlow::event: one priority per group
// cannot order both, since a microbatch's backward groups depend on each
// other in the reverse of its forward order). A node at depth d fixes the
// d-th event of the order (only events whose predecessor in their
// microbatch is placed can come next, so every path is valid); each expansion runs
// N_tries random completions through the interleaving and keeps the best
// score; nodes keep the best score below them (max, not mean) and a visit
// count; selection maximises s^alpha + beta sqrt(ln N_parent / N_child).
// The search starts from the default (microbatch-major) order, so it never
// returns a worse interleaving.
//
// Parallel workers (§7.2) share the tree under a mutex, each with its own
// interleaver; a worker selects and expands `sync_every` nodes per lock,
// rolls them out unlocked and backs the scores up under the lock. With one
// worker the search is deterministic given the seed; with several, the order
// in which workers take the lock varies, and so may the result.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/strategies/pipeweaver/interleave.h"

namespace loom {

struct RankingOptions {
  uint64_t seed = 0;
  int workers = 1;
  int tries = 10;           // N_tries random completions per expansion ("e.g. 10", §6.1)
  double alpha = 8;         // scores sit in a narrow band below 1; the power spreads them
  double beta = 0.1;        // exploration weight
  int sync_every = 4;       // expansions per lock (parallel mode)
  // The search stops after max_rollouts rollouts, so a seed gives one result
  // (standing rule 5). budget_s > 0 adds a wall-clock cap, set only by a
  // user who asks for one (`--schedule-budget`): when it binds, the best so
  // far is returned and the result depends on the machine's speed.
  int max_rollouts = 3000;
  double budget_s = 0;
  InterleaveOptions interleave;
};

struct RankingResult {
  std::vector<int> position;  // per event (StageFlow::event), its place in the order
  Interleaving best;
  int rollouts = 0;
  double elapsed_s = 0;
  bool exhausted = false;                        // the whole space was explored
  bool budget_hit = false;                       // stopped by the wall-clock cap (budget_s > 0)
  std::vector<std::pair<double, double>> trace;  // (elapsed s, best makespan s) at each improvement
};

RankingResult RankByMcts(const StageFlow& flow, const RankingOptions& options = {});

}  // namespace loom
