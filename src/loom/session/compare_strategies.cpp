#include "loom/session/compare_strategies.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

#include "loom/data/sample_source.h"
#include "loom/error.h"
#include "loom/session/training_session.h"

namespace loom {

double Comparison::SpeedupOverMegatron(int i) const {
  if (megatron < 0 || i < 0 || !outcomes[megatron].ok() || !outcomes[i].ok()) return 0;
  return outcomes[megatron].mean_iteration_time_s / outcomes[i].mean_iteration_time_s;
}

namespace {

// One strategy's row: its search on the representative batch, then its plan
// trained on batches 0..iterations-1.
StrategyOutcome PlanAndTrain(const std::string& name, const Model& model, const Cluster& cluster,
                             const Workload& workload, const SampleSource& source, const Batch& representative,
                             int iterations, const std::function<void(const Progress&)>& progress,
                             const CompareOptions& options, const std::shared_ptr<SearchMemo>& memo) {
  StrategyOutcome o;
  o.name = name;
  StrategyContext ctx{model, cluster, workload, representative, progress};
  ctx.fixed_tp = options.fixed_tp;
  ctx.fixed_pp = options.fixed_pp;
  ctx.fixed_dp = options.fixed_dp;
  ctx.fixed_encoder_sub_microbatch = options.fixed_encoder_sub_microbatch;
  ctx.schedule_rollouts = options.schedule_rollouts;
  ctx.schedule_budget_s = options.schedule_budget_s;
  ctx.fault_tolerance = options.fault_tolerance;
  ctx.time_budget_s = options.time_budget_s;
  ctx.prune = options.prune;
  ctx.memo = memo;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    o.result = RunStrategy(name, ctx);
  } catch (const NotApplicable& e) {
    o.error = e.what();
    o.not_applicable = true;
  } catch (const Error& e) {
    o.error = e.what();
  }
  o.planning_time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!o.ok()) return o;
  const auto sim0 = std::chrono::steady_clock::now();
  double last_progress_s = -1;
  double mfu = 0, bubble = 0, samples = 0, tokens = 0;
  TrainingSession session(ctx, name, o.result.plan);
  for (int i = 0; i < iterations; ++i) {
    if (progress) {
      const double elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - sim0).count();
      if (last_progress_s < 0 || elapsed_s - last_progress_s >= 0.1) {
        last_progress_s = elapsed_s;
        progress({name + ": batch", i + 1, iterations, elapsed_s});
      }
    }
    SimOptions opt;
    opt.record_timelines = i == 0;
    BatchOutcome step =
        session.Step(i == 0 ? representative : source.Draw(workload.global_batch, workload.seed, i), i, opt);
    o.batch_schedule_time_s += step.schedule_time_s / iterations;
    PlanRun& run = step.run;
    const PlanMetrics& m = run.metrics;
    if (options.keep_batches) {
      o.batches.push_back({i, step.schedule, m.iteration_time_s});
      o.iteration_times_s.push_back(m.iteration_time_s);
    }
    o.mean_iteration_time_s += m.iteration_time_s / iterations;
    o.max_iteration_time_s = std::max(o.max_iteration_time_s, m.iteration_time_s);
    mfu += m.mfu;
    bubble += m.bubble_ratio;
    samples += m.throughput_samples_per_s;
    tokens += m.throughput_tokens_per_s;
    o.peak_mem_bytes = std::max(o.peak_mem_bytes, m.peak_mem_bytes);
    o.overflow_batches += run.memory_violations.empty() ? 0 : 1;
    for (const auto& v : run.memory_violations) {
      if (o.memory_violations.size() < 100) o.memory_violations.push_back(fmt::format("batch {}: {}", i, v));
    }
    if (i == 0) o.first_run = std::move(run);
  }
  o.mfu = mfu / iterations;
  o.bubble_ratio = bubble / iterations;
  o.throughput_samples_per_s = samples / iterations;
  o.throughput_tokens_per_s = tokens / iterations;
  return o;
}

}  // namespace

Comparison CompareStrategies(const Model& model, const Cluster& cluster, const Workload& workload,
                             const std::vector<std::string>& strategies, int iterations,
                             const std::function<void(const Progress&)>& progress, const CompareOptions& options) {
  if (iterations < 1) throw Error(fmt::format("--iterations: must be >= 1, got {}", iterations));
  if (iterations > kMaxIterations && options.keep_batches) {
    throw Error(
        fmt::format("--iterations: at most {} sampled batches per strategy when each is kept (--json, "
                    "--report, --run write every batch), got {}; without them any number runs in the same "
                    "memory",
                    kMaxIterations, iterations));
  }
  if (options.jobs < 1) throw Error(fmt::format("--jobs: must be >= 1, got {}", options.jobs));
  Comparison cmp;
  cmp.model = model.name;
  cmp.cluster = cluster.name;
  cmp.workload = workload.name;
  cmp.global_batch = workload.global_batch;
  cmp.num_gpus = cluster.num_gpus();
  cmp.gpu_mem_bytes = static_cast<double>(cluster.gpu.mem_bytes);
  cmp.iterations = iterations;
  // Batch 0 plans; every batch is drawn again when simulated (draws are
  // deterministic), so memory does not grow with --iterations x the batch.
  const std::unique_ptr<SampleSource> source = WorkloadSource(workload);  // a JSONL file is read once
  const Batch representative = source->Draw(workload.global_batch, workload.seed, 0);
  cmp.outcomes.resize(strategies.size());
  const int jobs = std::min<int>(options.jobs, static_cast<int>(strategies.size()));
  if (jobs <= 1) {
    // One memo for every strategy: they price the same microbatches on many
    // of the same stages (prices are pure; search_memo.h).
    const auto memo = std::make_shared<SearchMemo>();
    for (size_t k = 0; k < strategies.size(); ++k) {
      cmp.outcomes[k] = PlanAndTrain(strategies[k], model, cluster, workload, *source, representative, iterations,
                                     progress, options, memo);
    }
  } else {
    // Strategies are independent: `jobs` threads take them in order, each
    // with its own memo (a memo is not thread-safe, and every cached value
    // is the value its function returns, so which thread priced a stage
    // first never changes a number). Rows land in the order asked for.
    std::mutex mu;  // serializes progress calls and guards `failure`
    std::atomic<size_t> next{0};
    std::exception_ptr failure;
    auto work = [&](int slot) {
      const auto memo = std::make_shared<SearchMemo>();
      std::function<void(const Progress&)> report;
      if (progress) {
        report = [&, slot](const Progress& p) {
          Progress q = p;
          q.slot = slot;
          std::lock_guard<std::mutex> lock(mu);
          progress(q);
        };
      }
      for (size_t k = next++; k < strategies.size(); k = next++) {
        try {
          cmp.outcomes[k] = PlanAndTrain(strategies[k], model, cluster, workload, *source, representative, iterations,
                                         report, options, memo);
        } catch (...) {  // not a strategy's Error (that is its row): stop every job, rethrow on the caller
          std::lock_guard<std::mutex> lock(mu);
          if (!failure) failure = std::current_exception();
          next = strategies.size();
        }
      }
      if (report) report({"", 0, 0, 0});  // this slot has nothing more to say
    };
    std::vector<std::thread> threads;
    for (int slot = 0; slot < jobs; ++slot) threads.emplace_back(work, slot);
    for (auto& t : threads) t.join();
    if (failure) std::rethrow_exception(failure);
  }
  for (size_t k = 0; k < strategies.size(); ++k) {
    if (strategies[k] == "megatron") cmp.megatron = static_cast<int>(k);
  }
  for (int i = 0; i < static_cast<int>(cmp.outcomes.size()); ++i) {
    const auto& o = cmp.outcomes[i];
    if (o.ok() && (cmp.best < 0 || o.mean_iteration_time_s < cmp.outcomes[cmp.best].mean_iteration_time_s)) {
      cmp.best = i;
    }
  }
  return cmp;
}

}  // namespace loom
