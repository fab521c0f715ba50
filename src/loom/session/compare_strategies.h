// The main job: plan a model on a cluster with several strategies, simulate
// each plan on the same N sampled batches, and compare (what `loom plan`
// prints and writes as JSON, report/comparison.h, and renders as HTML,
// report/html_report.h). Every strategy plans on the same representative
// batch (iteration 0) and is trained on iterations 0..N-1 by a
// TrainingSession (session/training_session.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "loom/plan/plan_json.h"
#include "loom/sim/plan_run.h"
#include "loom/strategies/strategy.h"

namespace loom {

struct StrategyOutcome {
  std::string name;
  std::string error;            // non-empty: the strategy found no plan
  bool not_applicable = false;  // with error: it does not apply here (strategies/strategy.h NotApplicable)
  StrategyResult result;
  double planning_time_s = 0;
  double batch_schedule_time_s = 0;       // mean per batch, for strategies that schedule each batch
  std::vector<double> iteration_times_s;  // one per simulated batch
  std::vector<RecordedBatch> batches;     // each batch with its schedule, as --json writes them for replay
  double mean_iteration_time_s = 0;
  double max_iteration_time_s = 0;
  double throughput_samples_per_s = 0;  // mean over batches
  double throughput_tokens_per_s = 0;
  double mfu = 0;
  double bubble_ratio = 0;
  double peak_mem_bytes = 0;                   // worst over batches
  std::vector<std::string> memory_violations;  // of batches after the representative one (the first 100 lines)
  int overflow_batches = 0;                    // batches after the representative one that overflow
  PlanRun first_run;                           // iteration 0 with intervals, for timelines
  bool ok() const { return error.empty(); }
};

struct Comparison {
  std::string model, cluster, workload;
  int64_t global_batch = 0;
  int num_gpus = 0;
  double gpu_mem_bytes = 0;
  int iterations = 0;
  std::vector<StrategyOutcome> outcomes;
  int best = -1;                            // fastest mean iteration time among those that planned
  int megatron = -1;                        // index of megatron, the reference for speedups
  double SpeedupOverMegatron(int i) const;  // 0 when either is missing
};

// Search settings every strategy sees (StrategyContext): TP / PP pinned to a
// paper's configuration (0: searched) and the per-batch schedule budget.
struct CompareOptions {
  int fixed_tp = 0;
  int fixed_pp = 0;
  int fixed_dp = 0;
  int fixed_encoder_sub_microbatch = 0;  // StrategyContext::fixed_encoder_sub_microbatch
  int schedule_rollouts = 3000;   // StrategyContext::schedule_rollouts
  double schedule_budget_s = 0;   // StrategyContext::schedule_budget_s; 0: no wall-clock cap
  int fault_tolerance = 0;   // Oobleck's f
  double time_budget_s = 0;  // per strategy's search (StrategyContext::time_budget_s); 0: none
  bool prune = true;         // StrategyContext::prune
  // Keep every batch's time and schedule (StrategyOutcome::iteration_times_s,
  // batches: for --json, --report, --run). Off, memory does not grow with the
  // number of batches: means and maxima are kept as they go.
  bool keep_batches = true;
  // Strategies planned and trained at once, each on its own thread with its
  // own memo (`loom plan --jobs`). Every number but the plan times is the same
  // for any value; progress calls are serialized and carry Progress::slot.
  int jobs = 1;
};

// The most sampled batches a comparison that keeps every batch
// (CompareOptions::keep_batches: its time and schedule, for --json, the
// report and replay) simulates per strategy: its memory grows with them.
constexpr int kMaxIterations = 10000;

Comparison CompareStrategies(const Model& model, const Cluster& cluster, const Workload& workload,
                             const std::vector<std::string>& strategies, int iterations,
                             const std::function<void(const Progress&)>& progress = {},
                             const CompareOptions& options = {});

}  // namespace loom
