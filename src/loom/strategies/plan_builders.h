// Building blocks the strategies share: cutting a unit's layers into pipeline
// stages, per-layer balance weights (parameters as Megatron-LM does, or
// simulated time on a batch), the model's module waves, and the search loop
// that simulates candidate plans and keeps the fastest that fits.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "loom/pipeline/partition.h"
#include "loom/plan/plan.h"
#include "loom/strategies/strategy.h"

namespace loom {

// Flattened (module, layer) list of `modules` (names, in model order).
std::vector<std::pair<int, int>> UnitLayers(const Model& model, const std::vector<std::string>& modules);

// Stages of one pipeline template from a partition of UnitLayers into
// pp x vpp stages (stage v on rank v % pp).
std::vector<StageSpec> StagesFromPartition(const Model& model, const std::vector<std::pair<int, int>>& layers,
                                           const Partition& partition, int pp);

// Append-only. kTimeFrozenUnaware: the time as if every layer trained (a
// planner blind to frozen modules: Cornstarch's "frozen-unaware" baseline).
enum class Balance { kParams, kTime, kTimeFrozenUnaware };
// Per-layer weights for the min-max partitioner: parameter counts, or forward +
// backward time of the whole representative batch at tensor parallel `tp`
// (frozen-aware, Cornstarch Eq. 3.2-3.3 via cost/frozen.h, unless unaware).
std::vector<double> LayerWeights(const StrategyContext& ctx, const std::vector<std::pair<int, int>>& layers,
                                 Balance balance, int tp);

// A one-unit plan with one pipeline template (Megatron-LM's layout).
Plan SingleUnitPlan(const StrategyContext& ctx, const std::string& strategy, int tp, int pp, int dp, int vpp,
                    int microbatches, ScheduleKind schedule, Recompute recompute, Balance balance,
                    int zero_stage);

// One unit with one pipeline template of `replicas` x `pp` groups starting at
// `first_group`, its stages balanced by `balance` at tensor parallel `tp`.
Unit MakeUnit(const StrategyContext& ctx, const std::string& name, const std::vector<std::string>& modules,
              int first_group, int tp, int phase, int replicas, int pp, int microbatches, ScheduleKind schedule,
              Recompute recompute, Balance balance);
// The same with the stages cut by a partition the strategy computed itself
// (Entrain's Eq. 4.1 on its fitted curves). REQUIRES: partition has pp stages.
Unit MakeUnit(const StrategyContext& ctx, const std::string& name, const std::vector<std::string>& modules,
              int first_group, int tp, int phase, int replicas, int pp, int microbatches, ScheduleKind schedule,
              Recompute recompute, const Partition& partition);
// An empty plan for the context (names, batch, group size).
Plan EmptyPlan(const StrategyContext& ctx, const std::string& strategy, int group_gpus);

// Modules by wave relative to the backbone: upstream (encoders, projectors),
// the backbone wave (backbone and anything neither upstream nor downstream),
// downstream (decoders, generators). Upstream modules are further split into
// branches: connected chains that can run side by side.
struct ModuleWaves {
  std::vector<std::vector<std::string>> upstream_branches;
  std::vector<std::string> backbone;
  std::vector<std::string> downstream;
  // Whether `module` is in some upstream branch (an encoder or projector).
  bool IsUpstream(const std::string& module) const;
};
ModuleWaves SplitWaves(const Model& model);

// Divisors of n in increasing order.
std::vector<int> Divisors(int64_t n);
// Tensor-parallel degrees to try: 1, 2, 4, 8 that divide a node.
std::vector<int> TpChoices(const Cluster& cluster);

// Calls visit(tp, pp, dp, microbatches) for every Megatron-style grid point:
// TP from TpChoices, PP dividing the rest with pp <= max_pp, DP = the rest
// dividing the global batch, and every microbatch count m >= pp that divides
// the replica's samples (m < pp only when it is all of them). The context's
// fixed_tp / fixed_pp, when set, pin TP and PP.
void ForEachPipelineGrid(const StrategyContext& ctx, int max_pp,
                         const std::function<void(int tp, int pp, int dp, int microbatches)>& visit);

// Simulates candidates on the representative batch and keeps the fastest that
// is valid and fits. `Try(make)` keeps the first of recomputation none,
// selective, full (each slower, each using less memory) that fits, probing
// full first so a candidate that cannot fit costs one simulation.
//
// Scale (docs/search.md): stage prices are memoized across candidates
// (StrategyContext::memo), and `Try` skips, without simulating, a candidate
// whose lower bound (sim/iteration_bound.h) exceeds the best time found so far,
// which therefore cannot be the best; the kept plan is the one an exhaustive
// search keeps, ties included (StrategyContext::prune off is that search).
// Strategies that know how many candidates they will try say so (Expect) for
// progress; the context's time budget stops Try and Evaluate when spent.
class CandidateSearch {
 public:
  CandidateSearch(const StrategyContext& ctx, std::string strategy);
  // Returns the iteration time of the plan, or a negative number when it is
  // invalid or does not fit (or the time budget is spent); keeps the plan
  // when it is the fastest so far. Never pruned: strategies use the time.
  double Evaluate(const Plan& plan);
  void Try(const std::function<Plan(Recompute)>& make);
  int feasible() const { return feasible_; }
  // The number of Try / Evaluate calls the strategy will make, for progress
  // ("candidate k of n"); 0: unknown.
  void Expect(int64_t total) { total_ = total; }
  // Runs `body` once with Try only counting its calls, and Expect()s that
  // count: for a strategy whose loop of Try calls is cheap to walk. (A loop
  // that branches on feasible() counts every branch: the count is an upper
  // bound.)
  void CountTries(const std::function<void()>& body);
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
  static constexpr double kPruned = -2;
  // The plan's iteration time; -1 when invalid or over memory; kPruned when
  // its lower bound exceeds `prune_above_s` (>= 0) and it was not simulated.
  double Simulate(const Plan& plan, double prune_above_s = -1);
  void Keep(const Plan& plan, double time_s);
  void Step();  // one more candidate: progress, budget

  const StrategyContext& ctx_;
  std::string strategy_;
  std::function<IterationSchedule(const Plan&)> schedule_;
  Plan best_;
  double best_time_s_ = -1;
  int candidates_ = 0, feasible_ = 0, pruned_ = 0;
  int64_t steps_ = 0, total_ = 0;
  int invalid_ = 0, overflow_ = 0;
  bool budget_spent_ = false;
  bool counting_ = false;
  double start_s_ = 0, last_progress_s_ = -1;
  std::string invalid_reason_, overflow_reason_, skipped_;
};

// "tp4 pp4 dp1 m16 interleaved(vpp2) recompute=full" for a unit.
std::string DescribeUnit(const Unit& unit);

}  // namespace loom
