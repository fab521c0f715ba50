// A strategy turns (model, cluster, workload) into a Plan. Each one searches
// its own space on a representative batch and says what it searched
// (Plan::searched). Baselines (strategies/baselines/) reproduce the systems the
// seed papers compare against; seed systems come in their own folders.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loom/data/sample.h"
#include "loom/error.h"
#include "loom/plan/plan.h"
#include "loom/plan/plan_json.h"
#include "loom/spec/cluster.h"
#include "loom/spec/model.h"
#include "loom/spec/workload.h"
#include "loom/strategies/search/search_memo.h"

namespace loom {

// Where a long step stands: unit `done` of `total` of `what` ("megatron:
// candidate", "megatron: batch") is in progress, done - 1 are finished;
// total 0 when unknown. `elapsed_s` since the step began. When several
// steps run at once (CompareOptions::jobs), `slot` says which reports; an
// empty `what` says that slot is done.
struct Progress {
  std::string what;
  int64_t done = 0;
  int64_t total = 0;
  double elapsed_s = 0;
  int slot = 0;
};

struct StrategyContext {
  const Model& model;
  const Cluster& cluster;
  const Workload& workload;
  const Batch& representative;  // the batch static plans are tuned on
  // Called as the search goes (a few times a second at most); may be empty.
  std::function<void(const Progress&)> progress;
  // Pin the tensor / pipeline parallel degree of the Megatron-style grid
  // (ForEachPipelineGrid) to a paper's configuration; 0 searches all.
  int fixed_tp = 0;
  int fixed_pp = 0;
  // Pin the data-parallel degree (Entrain §4.7 runs every framework at DP 4);
  // 0 searches all. Honoured by the Megatron-style grid and Entrain's search.
  int fixed_dp = 0;
  // Pin PipeWeaver's sub-microbatch size B_i of every encoder-side modality
  // module (images per sub-microbatch; the paper's Fig. 10 sweeps 4-32 and
  // runs 12); 0 lets the cost model choose (partitioner.h, SubMicrobatchSize).
  int fixed_encoder_sub_microbatch = 0;
  // Pin activation recomputation (`loom replay --recompute`: the Oobleck
  // thesis recomputes every layer, §2.7.1); unset: each candidate takes the
  // least that fits. Honoured by CandidateSearch and Oobleck's templates.
  std::optional<Recompute> fixed_recompute;
  // Rollouts of a per-batch schedule search (PipeWeaver's MCTS, §6.1); 0
  // keeps the default ranking. The layout choice among the static plans runs
  // a tenth of them per layout. A budget in rollouts makes the plan a function
  // of the seed alone (standing rule 5).
  int schedule_rollouts = 3000;
  // Wall-clock cap on each such search (`--schedule-budget`), only where the
  // user sets one; 0: none. When it binds, the result depends on the machine.
  double schedule_budget_s = 0;
  // Oobleck's fault-tolerance threshold f: pipelines that may fail at once
  // without a restart (at least f + 1 pipelines are instantiated).
  int fault_tolerance = 0;
  // Wall-clock budget of the whole search (`--time-budget`); 0: none. When it
  // is spent the search stops and returns the best plan found so far, and its
  // Plan::searched says how many candidates it left.
  double time_budget_s = 0;
  // Skip candidates whose lower bound (sim/iteration_bound.h) already exceeds
  // the best plan's time; false simulates every one (the exhaustive reference
  // the pruning is tested against). The best plan is the same either way.
  bool prune = true;
  // Caches of the search (strategies/search/search_memo.h); a fresh one per context.
  std::shared_ptr<SearchMemo> memo = std::make_shared<SearchMemo>();
};

// A strategy that does not apply to this problem or these flags (a --tp pin
// for a strategy that searches its own degrees, a model without the modules
// it places), as opposed to one that applies and finds no plan that fits: the
// comparison says which (report/comparison.h).
struct NotApplicable : Error {
  using Error::Error;
};

struct StrategyResult {
  Plan plan;
  std::string config;         // one-line summary: "tp4 pp4 dp1 m16 interleaved(vpp2) recompute=full"
  int candidates = 0;         // configurations simulated
  int feasible = 0;           // of which fit in memory
  int pruned = 0;             // configurations skipped: their lower bound exceeds the best plan's time
  bool budget_spent = false;  // the search stopped at StrategyContext::time_budget_s
};

// Registered strategy names in report order (megatron first): those `--strategy
// all` runs, plus, with `variants`, the ablations a seed paper measures against
// (mmscale-ratio, mmscale-noreorder), which run only when named.
std::vector<std::string> StrategyNames(bool variants = false);
// One-line description of a strategy (for --help and reports).
std::string StrategyDescription(const std::string& name);
// Throws loom::Error for an unknown name (listing the valid ones) or when the
// strategy finds no plan that fits (saying what it tried).
StrategyResult RunStrategy(const std::string& name, const StrategyContext& context);

// Whether the strategy refines every batch (plan shape 5: MMScale's data-aware
// reordering, PipeWeaver's per-batch schedule).
bool SchedulesBatches(const std::string& name);
// The strategy's IterationSchedule for one batch of its plan. REQUIRES:
// SchedulesBatches(name).
IterationSchedule ScheduleBatch(const std::string& name, const StrategyContext& context, const Plan& plan,
                                const Batch& batch, int64_t iteration);

// Per iteration 0..count-1, the schedule the strategy runs that iteration's
// batch with: the one `recorded` holds for it (what `loom plan` simulated;
// recomputing it gives the same schedule unless a wall-clock cap bound),
// else the strategy's own for it; all absent for strategies that do not
// schedule batches.
std::vector<std::optional<IterationSchedule>> ScheduleIterations(const std::string& name,
                                                                 const StrategyContext& context, const Plan& plan,
                                                                 const std::vector<RecordedBatch>& recorded, int count);

}  // namespace loom
