// The search loop every strategy uses: simulates candidate plans on the
// representative batch and keeps the fastest that fits (docs/search.md).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "loom/plan/execution_plan.h"
#include "loom/plan/plan.h"
#include "loom/sim/pipeline_costs.h"
#include "loom/strategies/strategy.h"

namespace loom {

// Simulates candidates on the representative batch and keeps the fastest that
// is valid and fits. `Try(make)` keeps the first of recomputation none,
// selective, full (each slower, each using less memory) that fits, probing
// full first so a candidate that cannot fit costs one simulation.
//
// At scale (docs/search.md) a search skips candidates that cannot win:
//   - a candidate whose lower bound (sim/iteration_bound.h) exceeds the best
//     time found so far is not simulated; nor one whose resident model state
//     alone overflows a GPU (it cannot fit);
//   - Run(loop) walks the strategy's loop of Try / TryEither calls three
//     times: first pricing each candidate's most loaded replica for its bound
//     (no simulation), then simulating the few with the lowest bounds, then
//     the rest in loop order, each skipped when its bound exceeds the best;
//   - stage prices are memoized across candidates (StrategyContext::memo).
// The kept plan is the one an exhaustive walk keeps, ties included: among
// equal times the earliest in loop order wins however the walk is ordered
// (StrategyContext::prune off is that exhaustive walk). Strategies whose loop
// depends on results as it goes (feasible()) call Try directly and get the
// in-order skip only, or Exhaustive(). The context's time budget stops it.
class CandidateSearch {
 public:
  CandidateSearch(const StrategyContext& ctx, std::string strategy);
  // Returns the iteration time of the plan, or a negative number when it is
  // invalid or does not fit (or the time budget is spent); keeps the plan
  // when it is the fastest so far. Never skipped: strategies use the time.
  double Evaluate(const Plan& plan);
  // Evaluate for a strategy that uses only the times up to `above_s` (>= the
  // best so far; < 0: every time): with pruning on, a plan whose lower bound
  // (or heaviest replica alone) exceeds it is not simulated and kAbove is
  // returned. The times it returns otherwise are Evaluate's.
  static constexpr double kAbove = -2;
  double EvaluateUpTo(const Plan& plan, double above_s);
  void Try(const std::function<Plan(Recompute)>& make);
  // Try(primary); then Try(fallback) only when no recomputation choice of
  // primary fits (stages balanced by time, else by parameters).
  void TryEither(const std::function<Plan(Recompute)>& primary, const std::function<Plan(Recompute)>& fallback);
  // Runs `loop`, a walk of Try / TryEither calls that depends on nothing the
  // search returns, in the bound-first order above; progress counts its
  // candidates of their total.
  void Run(const std::function<void()>& loop);
  // Simulates every candidate (no bound skips): for searches that stop after
  // a number of fitting candidates, which skipping would change.
  void Exhaustive() { prune_ = false; }
  int feasible() const { return feasible_; }
  // The number of Try / Evaluate calls the strategy will make, for progress
  // ("candidate k of n"); 0: unknown. Run() sets it itself.
  void Expect(int64_t total) { total_ = total; }
  // Whether the context's time budget is spent: the strategy may stop early.
  bool BudgetSpent();
  // Candidates run this batch's schedule from `schedule` (strategies whose
  // plans adapt per batch: Entrain); unset, the plan's own schedule.
  void SetBatchSchedule(std::function<IterationSchedule(const Plan&)> schedule) { schedule_ = std::move(schedule); }
  // Records why a whole part of the space was not tried (shown if nothing fits).
  void Skip(const std::string& reason) { skipped_ = reason; }
  // Throws loom::Error when nothing fit. Fills config from `describe(best)`.
  StrategyResult Finish(const std::string& searched, const std::function<std::string(const Plan&)>& describe);

 private:
  static constexpr double kPruned = kAbove;
  // Where Run() is: kDirect outside it.
  enum class Pass { kDirect, kBounds, kLowest, kRest };
  // What is known of one Try of a Run().
  enum class Outcome { kUnseen, kFits, kNoFit, kSkipped };
  struct TryState {
    double bound_s = -1;        // lower bound of its none variant; < 0: unknown
    bool cannot_fit = false;    // its memory lower bound overflows a GPU under every recomputation
    std::string overflow;       // why, when it cannot fit
    std::string none_overflow;  // why its none variant cannot fit (its memory bound); empty: it may
    bool invalid = false;       // building or compiling it fails, with none and with full recomputation
    std::string invalid_reason;
    Outcome outcome = Outcome::kUnseen;
  };
  // The plan compiled for this search: its batch schedule, replicas folded;
  // `only_replica` >= 0: that replica's contents alone (CompileOptions).
  ExecutionPlan Compile(const Plan& plan, int only_replica = -1) const;
  // The plan's iteration time; -1 when invalid or over memory; kPruned when
  // its lower bound exceeds `prune_above_s` (>= 0) and it was not simulated.
  double Simulate(const Plan& plan, double prune_above_s = -1);
  void Keep(const Plan& plan, double time_s, int64_t order);
  bool Step();  // one more candidate: progress; false when the budget is spent
  // Progress: `what` (after the strategy's name) `done` of the total, at
  // most ten times a second unless `now_or_never` (a step's first unit).
  void Report(const char* what, int64_t done, bool now_or_never);
  // Evaluates Try number `index` now: kFits, kNoFit or (with `prune`) kSkipped.
  Outcome TryNow(const std::function<Plan(Recompute)>& make, int64_t index, bool prune);
  // Why `plan` (compiled to `exec`, priced as `costs` for one replica)
  // cannot fit: its memory lower bound overflows a GPU group; empty if not.
  std::string MemoryOverflow(const ExecutionPlan& exec, const Plan& plan, const PipelineCosts& costs) const;
  // The bound pass's work for one Try.
  TryState Bound(const std::function<Plan(Recompute)>& make);
  // Whether Try `index` should be skipped in this pass (bound or known fit).
  bool SkipInThisPass(int64_t index);
  // One Try at `index` in the current pass; returns what is known of it.
  Outcome Visit(const std::function<Plan(Recompute)>& make, int64_t index);
  double PruneAbove() const { return prune_ ? best_time_s_ : -1; }

  const StrategyContext& ctx_;
  std::string strategy_;
  std::function<IterationSchedule(const Plan&)> schedule_;
  // (replicas, microbatches) of a replicated plan's first unit -> its
  // heaviest replica (Bound).
  std::map<std::pair<int, int>, int> heaviest_of_cut_;
  bool prune_ = true;
  Plan best_;
  double best_time_s_ = -1;
  int64_t best_order_ = -1;  // loop position of the best (ties: the earliest wins)
  int candidates_ = 0, feasible_ = 0, pruned_ = 0;
  int64_t steps_ = 0, total_ = 0;
  int invalid_ = 0, overflow_ = 0;
  bool budget_spent_ = false;
  double start_s_ = 0, last_progress_s_ = -1;
  double step_start_s_ = 0;  // when the bound walk or the simulations began (Report)
  std::string invalid_reason_, overflow_reason_, skipped_;
  // Runs `body` with Try only counting its calls; Expect()s the count.
  void CountTries(const std::function<void()>& body);

  // Run() state.
  bool counting_ = false;
  Pass pass_ = Pass::kDirect;
  int64_t next_index_ = 0;       // Try number within the current walk
  std::vector<TryState> tries_;  // per Try number
  std::vector<char> lowest_;     // per Try number: simulated in the kLowest pass
};

}  // namespace loom
