#include "loom/strategies/search/candidate_search.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include "loom/error.h"
#include "loom/human_bytes.h"
#include "loom/plan/compile_plan.h"
#include "loom/sim/iteration_bound.h"
#include "loom/sim/plan_run.h"
#include "loom/sim/price_execution.h"
#include "loom/sim/simulator.h"

namespace loom {

namespace {

// Whether a lower bound `bound_s` exceeds `limit_s` (either < 0: unknown,
// never). The bound and the simulator sum the same durations in different
// orders: a relative margin far above rounding keeps every skip exact.
bool Exceeds(double bound_s, double limit_s) { return bound_s >= 0 && limit_s >= 0 && bound_s * (1 - 1e-9) > limit_s; }

}  // namespace

namespace {

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

CandidateSearch::CandidateSearch(const StrategyContext& ctx, std::string strategy)
    : ctx_(ctx), strategy_(std::move(strategy)), prune_(ctx.prune), start_s_(NowSeconds()) {}

bool CandidateSearch::BudgetSpent() {
  if (!budget_spent_ && ctx_.time_budget_s > 0 && NowSeconds() - start_s_ >= ctx_.time_budget_s) {
    budget_spent_ = true;
  }
  return budget_spent_;
}

void CandidateSearch::Report(const char* what, int64_t done, bool now_or_never) {
  if (!ctx_.progress) return;
  const double now = NowSeconds();
  // Ten lines a second is all a terminal needs; the first of a step always shows.
  if (!now_or_never && last_progress_s_ >= 0 && now - last_progress_s_ < 0.1) return;
  last_progress_s_ = now;
  if (now_or_never) step_start_s_ = now;  // elapsed (and the estimate) count this step's time only
  // A total only where the strategy said one (Expect, Run); never below the count.
  ctx_.progress({strategy_ + what, done, total_ > 0 ? std::max(total_, done) : 0, now - step_start_s_});
}

bool CandidateSearch::Step() {
  if (BudgetSpent()) return false;
  ++steps_;
  Report(": candidate", steps_, steps_ == 1);
  return true;
}

double CandidateSearch::Evaluate(const Plan& plan) {
  const int64_t order = next_index_++;
  if (!Step()) return -1;
  const double t = Simulate(plan);
  if (t >= 0) Keep(plan, t, order);
  return t;
}

ExecutionPlan CandidateSearch::Compile(const Plan& plan, int only_replica) const {
  std::optional<IterationSchedule> it;
  if (schedule_) it = schedule_(plan);
  // Folded replicas simulate to the same time and peaks (CompileOptions).
  return CompilePlan(ctx_.model, ctx_.cluster, ctx_.workload, plan, ctx_.representative, it ? &*it : nullptr,
                     CompileOptions{.fold_replicas = true, .only_replica = only_replica});
}

double CandidateSearch::EvaluateUpTo(const Plan& plan, double above_s) {
  const int64_t order = next_index_++;
  if (!Step()) return -1;
  // Never below the best: a plan skipped is slower than one already kept.
  const double t = Simulate(plan, prune_ && above_s >= 0 ? std::max(above_s, best_time_s_) : -1);
  if (t >= 0) Keep(plan, t, order);
  return t;
}

double CandidateSearch::Simulate(const Plan& plan, double prune_above_s) {
  SimOptions opt;
  opt.record_timelines = false;
  try {
    PricingMemo& memo = ctx_.memo->pricing;
    auto beyond = [&](double time_s) { return Exceeds(time_s, prune_above_s); };
    // Stop early on a dominated candidate: its heaviest replica alone,
    // priced and simulated, takes no longer than the whole iteration (the
    // replicas run apart until their all-reduces, which start at the latest
    // replica's readiness) and peaks exactly as it does there, at a fraction
    // of the cost. Only that replica's contents are compiled for this; which
    // one it is depends on the plan's cut alone (Bound), found once per cut.
    // Memory alone is reason enough when pruning is on: a replica that
    // overflows (by the memory lower bound, or simulated alone) overflows
    // the whole plan, which would be simulated only to return -1.
    const std::pair<int, int> cut{plan.units[0].num_replicas(), plan.units[0].pipelines[0].microbatches};
    const bool early = (prune_above_s >= 0 || prune_) && cut.first > 1;
    auto overflows = [&](const std::string& why) {
      if (why.empty()) return false;
      ++candidates_;
      ++overflow_;
      overflow_reason_ = why;
      return true;
    };
    std::optional<ExecutionPlan> full;
    if (early && !heaviest_of_cut_.count(cut)) {
      full = Compile(plan);
      if (full->replicated) heaviest_of_cut_[cut] = HeaviestReplica(*full, ctx_.model, ctx_.representative, &memo);
    }
    if (early && heaviest_of_cut_.count(cut)) {
      ExecutionPlan alone_exec = Compile(plan, heaviest_of_cut_.at(cut));
      if (alone_exec.replicated) {
        ExecutionCosts alone =
            PriceExecution(alone_exec, ctx_.model, ctx_.cluster, ctx_.representative, nullptr, &memo);
        if (beyond(IterationLowerBound_s(alone_exec, alone))) {
          ++pruned_;
          return kPruned;
        }
        if (overflows(MemoryOverflow(alone_exec, plan, alone.replicas.front()))) return -1;
        const PlanRun run = RunExecution(ctx_.cluster, std::move(alone_exec), std::move(alone), opt);
        if (!run.memory_violations.empty() && overflows(run.memory_violations.front())) return -1;
        if (beyond(run.metrics.iteration_time_s)) {
          ++pruned_;
          return kPruned;
        }
      } else if (!full) {
        full = std::move(alone_exec);  // not replicated: only_replica was ignored, this is the whole plan
      }
    }
    if (!full) full = Compile(plan);
    ExecutionPlan& exec = *full;
    ExecutionCosts costs = PriceExecution(exec, ctx_.model, ctx_.cluster, ctx_.representative, nullptr, &memo);
    if (beyond(IterationLowerBound_s(exec, costs))) {
      ++pruned_;
      return kPruned;
    }
    if (prune_ && overflows(MemoryOverflow(exec, plan, costs.replicas.front()))) return -1;
    ++candidates_;
    PlanRun run = RunExecution(ctx_.cluster, std::move(exec), std::move(costs), opt);
    if (!run.memory_violations.empty()) {
      ++overflow_;
      overflow_reason_ = run.memory_violations.front();
      return -1;
    }
    return run.metrics.iteration_time_s;
  } catch (const Error& e) {
    ++candidates_;
    ++invalid_;
    invalid_reason_ = e.what();
    return -1;
  }
}

void CandidateSearch::Keep(const Plan& plan, double time_s, int64_t order) {
  ++feasible_;
  if (best_time_s_ < 0 || time_s < best_time_s_ || (time_s == best_time_s_ && order < best_order_)) {
    best_time_s_ = time_s;
    best_order_ = order;
    best_ = plan;
  }
}

CandidateSearch::Outcome CandidateSearch::TryNow(const std::function<Plan(Recompute)>& make, int64_t index,
                                                 bool prune) {
  // A candidate whose bound exceeds the best time cannot become the best: it
  // is skipped unsimulated. (A plan is kept only when faster than the best,
  // or as fast and earlier in the loop, so skipping one that is slower
  // changes nothing an exhaustive search would keep.)
  const double prune_above_s = prune ? PruneAbove() : -1;
  auto build = [&](Recompute r, Plan* plan) {
    try {
      *plan = make(r);
      return true;
    } catch (const Error& e) {
      ++candidates_;
      ++invalid_;
      invalid_reason_ = e.what();
      return false;
    }
  };
  // Full recomputation holds the least activation memory: a candidate that
  // does not fit with it fits with none, and is dropped after one simulation
  // instead of three. Otherwise the first of none, selective, full that fits
  // is kept (the probe itself is kept only when it is that first). A skipped
  // probe says nothing about fit: then none and selective are tried as they
  // come (each skipped or simulated), and full, skipped, is not kept.
  if (ctx_.fixed_recompute) {  // pinned: that level only
    Plan plan;
    if (!build(*ctx_.fixed_recompute, &plan)) return Outcome::kNoFit;
    const double t = Simulate(plan, prune_above_s);
    if (t >= 0) {
      Keep(plan, t, index);
      return Outcome::kFits;
    }
    return t == kPruned ? Outcome::kSkipped : Outcome::kNoFit;
  }
  Plan full;
  if (!build(Recompute::kFull, &full)) return Outcome::kNoFit;
  const double full_s = Simulate(full, prune_above_s);
  if (full_s < 0 && full_s != kPruned) return Outcome::kNoFit;
  for (Recompute r : {Recompute::kNone, Recompute::kSelective}) {
    if (r == Recompute::kNone && index < static_cast<int64_t>(tries_.size()) && !tries_[index].none_overflow.empty() &&
        pass_ != Pass::kDirect) {
      ++overflow_;  // its memory bound overflows: it would not fit
      overflow_reason_ = tries_[index].none_overflow;
      continue;
    }
    Plan plan;
    if (!build(r, &plan)) return Outcome::kNoFit;
    const double t = Simulate(plan, prune_above_s);
    if (t >= 0) {
      Keep(plan, t, index);
      return Outcome::kFits;
    }
  }
  if (full_s >= 0) {
    Keep(full, full_s, index);
    return Outcome::kFits;
  }
  return Outcome::kSkipped;  // full was skipped: whether it fits is unknown
}

std::string CandidateSearch::MemoryOverflow(const ExecutionPlan& exec, const Plan& plan,
                                            const PipelineCosts& costs) const {
  // A rank holds its resident state throughout and each microbatch's
  // activations from its forward's start to its backward's end, so when its
  // first backward starts it holds the state, the activations of every
  // forward before it in its order (all of them under GPipe) and the
  // backward's transient buffers: its peak is at least that. Ranks sharing a
  // GPU group (units in temporal phases) add up: the group holds every one's
  // state. Phases take turns (plan/plan.h): a later phase's first forward
  // waits for an earlier one's last forward, and the earlier one's first
  // backward waits for the later one's last backward, so when a rank of the
  // group's last phase starts its first backward, every rank of an earlier
  // phase holds all its forwards' activations. (With phase rounds each round
  // holds only its share: then one rank's.)
  // (A replicated plan's ranks are one replica's, on that replica's groups.)
  std::map<int, int> last_phase;  // group -> its latest phase
  auto phase_of = [&](size_t r) { return plan.units[exec.ranks[r].unit].phase; };
  for (size_t r = 0; r < costs.static_bytes.size(); ++r) {
    auto [pos, inserted] = last_phase.try_emplace(exec.ranks[r].group, phase_of(r));
    if (!inserted) pos->second = std::max(pos->second, phase_of(r));
  }
  std::map<int, std::pair<double, double>>
      group_bytes;  // group -> (states + earlier phases' activations, largest other)
  for (size_t r = 0; r < costs.static_bytes.size(); ++r) {
    // What its forwards keep until its first backward, and that backward's
    // working set (and recomputed activations) on top while it runs.
    double kept = 0, working = 0;
    for (const Action& a : exec.schedule.ranks[r]) {
      if (a.kind == ActionKind::kForward) kept += costs.at(a.stage, a.microbatch).activation_bytes;
      if (a.kind == ActionKind::kBackward || a.kind == ActionKind::kBackwardData) {
        working = costs.at(a.stage, a.microbatch).transient_bytes;
        break;
      }
    }
    const int key = exec.ranks[r].group;
    auto& [states, most] = group_bytes[key];
    states += costs.static_bytes[r];
    if (plan.phase_rounds <= 1 && phase_of(r) < last_phase[key]) {
      states += kept;  // while a later phase's rank starts its first backward, this one is in none of its own
    } else {
      most = std::max(most, kept + working);
    }
  }
  for (const auto& [group, bytes] : group_bytes) {
    const double peak_bytes = bytes.first + bytes.second;
    if (peak_bytes > ctx_.cluster.usable_mem_bytes()) {
      return fmt::format(
          "GPU group {}: the model state of its ranks and the activations they hold at a first backward take at "
          "least {}, over the {} usable on an {}",
          group, HumanBytes(peak_bytes), HumanBytes(ctx_.cluster.usable_mem_bytes()), ctx_.cluster.gpu.name);
    }
  }
  return "";
}

CandidateSearch::TryState CandidateSearch::Bound(const std::function<Plan(Recompute)>& make) {
  TryState st;
  if (BudgetSpent()) return st;
  try {
    // Recomputation only adds work and leaves the model state as it is: the
    // none variant's bound and state bound every variant.
    PricingMemo& memo = ctx_.memo->pricing;
    // One replica alone bounds the iteration, and the one with the most
    // tokens bounds it (time and memory) tightest. Which one that is depends
    // only on how the batch is cut: the replica count and microbatches. It
    // is found once per cut from every replica's contents; later candidates
    // with that cut compile that replica's contents alone (building every
    // replica's microbatches costs more than the bound).
    const Plan plan = make(Recompute::kNone);
    const std::pair<int, int> cut{plan.units[0].num_replicas(), plan.units[0].pipelines[0].microbatches};
    auto known = heaviest_of_cut_.find(cut);
    const ExecutionPlan exec = Compile(plan, known == heaviest_of_cut_.end() ? -1 : known->second);
    if (known == heaviest_of_cut_.end() && exec.replicated) {
      heaviest_of_cut_[cut] =
          exec.replicas.size() > 1 ? HeaviestReplica(exec, ctx_.model, ctx_.representative, &memo) : 0;
    }
    auto heaviest = [&](const ExecutionPlan& exec) {
      const int one = exec.replicas.size() > 1 ? HeaviestReplica(exec, ctx_.model, ctx_.representative, &memo) : -1;
      return PriceExecution(exec, ctx_.model, ctx_.cluster, ctx_.representative, nullptr, &memo, one);
    };
    const ExecutionCosts costs = heaviest(exec);
    st.bound_s = IterationLowerBound_s(exec, costs);
    // Memory: full recomputation holds the least; over the usable memory
    // under it, no variant fits. Over under none, that variant need not be
    // simulated (and full, holding less, is not over either).
    st.none_overflow = MemoryOverflow(exec, plan, costs.replicas.front());
    if (!st.none_overflow.empty()) {
      const Plan full = make(Recompute::kFull);
      const ExecutionPlan full_exec = Compile(full, heaviest_of_cut_.count(cut) ? heaviest_of_cut_.at(cut) : -1);
      st.overflow = MemoryOverflow(full_exec, full, heaviest(full_exec).replicas.front());
      st.cannot_fit = !st.overflow.empty();
    }
  } catch (const Error& e) {
    st = TryState{};
    // Invalid with no recomputation and with full (the variant an exhaustive
    // walk builds first): invalid as a whole, counted once when its turn
    // comes. Otherwise evaluated as it comes.
    try {
      Compile(make(Recompute::kFull));
    } catch (const Error& full_error) {
      st.invalid = true;
      st.invalid_reason = full_error.what();
    }
  }
  return st;
}

bool CandidateSearch::SkipInThisPass(int64_t index) {
  TryState& st = tries_[index];
  if (st.invalid) {
    ++candidates_;
    ++invalid_;
    invalid_reason_ = st.invalid_reason;
    st.outcome = Outcome::kNoFit;
    return true;
  }
  if (st.cannot_fit) {
    ++overflow_;
    overflow_reason_ = st.overflow;
    st.outcome = Outcome::kNoFit;
    return true;
  }
  if (Exceeds(st.bound_s, best_time_s_)) {
    ++pruned_;
    st.outcome = Outcome::kSkipped;
    return true;
  }
  return false;
}

CandidateSearch::Outcome CandidateSearch::Visit(const std::function<Plan(Recompute)>& make, int64_t index) {
  switch (pass_) {
    case Pass::kDirect:
      if (!Step()) return Outcome::kSkipped;
      return TryNow(make, index, prune_);
    case Pass::kBounds:
      Report(": bounding candidates", index + 1, index == 0);
      tries_.push_back(Bound(make));
      return Outcome::kUnseen;
    case Pass::kLowest:
    case Pass::kRest: {
      TryState& st = tries_.at(index);
      if (st.outcome != Outcome::kUnseen || (pass_ == Pass::kLowest && !lowest_[index])) return st.outcome;
      if (!Step() || SkipInThisPass(index)) return st.outcome;
      st.outcome = TryNow(make, index, true);
      return st.outcome;
    }
  }
  return Outcome::kUnseen;
}

void CandidateSearch::Try(const std::function<Plan(Recompute)>& make) {
  if (counting_) {
    ++steps_;
    return;
  }
  Visit(make, next_index_++);
}

void CandidateSearch::TryEither(const std::function<Plan(Recompute)>& primary,
                                const std::function<Plan(Recompute)>& fallback) {
  if (counting_) {
    steps_ += 2;
    return;
  }
  const int64_t i = next_index_++, j = next_index_++;
  if (pass_ == Pass::kBounds) {
    Visit(primary, i);
    Visit(fallback, j);
    return;
  }
  const Outcome a = Visit(primary, i);
  if (a == Outcome::kFits || BudgetSpent()) return;
  if (a == Outcome::kNoFit) {
    Visit(fallback, j);
    return;
  }
  // Whether the primary fits is unknown (skipped by its bound, or not this
  // pass's): it matters only if the fallback could be the best.
  if (pass_ == Pass::kDirect) {
    if (!prune_) return;  // unreachable: an exhaustive walk knows
    const TryState fb = Bound(fallback);
    if (Exceeds(fb.bound_s, best_time_s_)) {
      ++pruned_;
      return;
    }
    if (TryNow(primary, i, false) == Outcome::kNoFit && Step()) TryNow(fallback, j, prune_);
    return;
  }
  TryState& fb = tries_.at(j);
  if (fb.outcome != Outcome::kUnseen || (pass_ == Pass::kLowest && !lowest_[j])) return;
  if (Exceeds(fb.bound_s, best_time_s_)) {
    Visit(fallback, j);  // skipped by its bound (and counted so)
    return;
  }
  Outcome& ai = tries_.at(i).outcome;
  if (ai != Outcome::kFits && ai != Outcome::kNoFit) ai = TryNow(primary, i, false);
  if (ai == Outcome::kNoFit) {
    Visit(fallback, j);
  } else {
    fb.outcome = Outcome::kSkipped;  // an exhaustive walk does not try it
  }
}

void CandidateSearch::CountTries(const std::function<void()>& body) {
  counting_ = true;
  const int64_t before = steps_;
  body();
  total_ = steps_ - before;
  steps_ = before;
  counting_ = false;
}

void CandidateSearch::Run(const std::function<void()>& loop) {
  CountTries(loop);
  if (!prune_) {
    loop();  // the exhaustive walk, in loop order
    return;
  }
  const int64_t base = next_index_;
  if (base != 0) throw Error("CandidateSearch::Run: the search already tried candidates");
  auto walk = [&](Pass pass) {
    pass_ = pass;
    next_index_ = 0;
    loop();
    pass_ = Pass::kDirect;
  };
  tries_.clear();
  walk(Pass::kBounds);
  // The few lowest bounds first: a good best early skips most of the rest.
  constexpr size_t kLowest = 4;
  std::vector<int64_t> order;
  for (int64_t i = 0; i < static_cast<int64_t>(tries_.size()); ++i) {
    if (tries_[i].bound_s >= 0 && !tries_[i].cannot_fit) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return tries_[a].bound_s < tries_[b].bound_s; });
  lowest_.assign(tries_.size(), 0);
  for (size_t k = 0; k < order.size() && k < kLowest; ++k) lowest_[order[k]] = 1;
  walk(Pass::kLowest);
  walk(Pass::kRest);
  next_index_ = static_cast<int64_t>(tries_.size());
}

StrategyResult CandidateSearch::Finish(const std::string& searched,
                                       const std::function<std::string(const Plan&)>& describe) {
  if (best_time_s_ < 0) {
    std::string why;
    if (overflow_ > 0) why += fmt::format("\n  {} do not fit in memory, e.g. {}", overflow_, overflow_reason_);
    if (invalid_ > 0) why += fmt::format("\n  {} are invalid, e.g. {}", invalid_, invalid_reason_);
    if (!skipped_.empty()) why += "\n  " + skipped_;
    if (budget_spent_) {
      why += fmt::format("\n  the time budget of {:g} s was spent after {} candidates{}; give it more time",
                         ctx_.time_budget_s, steps_, total_ > 0 ? fmt::format(" of {}", total_) : "");
    }
    if (why.empty()) {  // nothing was even tried: the pins (or the batch) leave no candidate
      why = fmt::format("\n  no candidate matched{}{}{} with the global batch {} on {} GPUs",
                        ctx_.fixed_tp > 0 ? fmt::format(" --tp {}", ctx_.fixed_tp) : "",
                        ctx_.fixed_pp > 0 ? fmt::format(" --pp {}", ctx_.fixed_pp) : "",
                        ctx_.fixed_dp > 0 ? fmt::format(" --dp {}", ctx_.fixed_dp) : "", ctx_.workload.global_batch,
                        ctx_.cluster.num_gpus());
    }
    throw Error(fmt::format("strategy {}: no configuration it tried ({}) works for {} on {}:{}", strategy_, searched,
                            ctx_.model.name, ctx_.cluster.name, why));
  }
  StrategyResult r;
  r.plan = best_;
  r.plan.searched = fmt::format("{} ({} simulated, {} fit", searched, candidates_, feasible_);
  if (overflow_ > 0) r.plan.searched += fmt::format(", {} over memory", overflow_);
  if (invalid_ > 0) r.plan.searched += fmt::format(", {} invalid", invalid_);
  if (pruned_ > 0) r.plan.searched += fmt::format(", {} skipped by their lower bound", pruned_);
  if (budget_spent_) {
    r.plan.searched +=
        total_ > 0
            ? fmt::format("; time budget of {:g} s spent after {} of {} candidates", ctx_.time_budget_s, steps_, total_)
            : fmt::format("; time budget of {:g} s spent after {} candidates", ctx_.time_budget_s, steps_);
  }
  r.plan.searched += ")";
  r.config = describe(best_);
  r.candidates = candidates_;
  r.feasible = feasible_;
  r.pruned = pruned_;
  r.budget_spent = budget_spent_;
  return r;
}

}  // namespace loom
