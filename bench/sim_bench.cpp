// Simulator speed at cluster scale (issue 3): vlm-xl (ViT-22B + GPT-175B) on
// 16384 H100s, DP128 TP8 PP16, 64 microbatches per replica; and incremental
// re-simulation against a full one at m = 64.
#include <benchmark/benchmark.h>

#include <memory>

#include "loom/data/sample_source.h"
#include "loom/pipeline/schedules.h"
#include "loom/plan/compile_plan.h"
#include "loom/sim/price_execution.h"
#include "loom/sim/simulator.h"
#include "loom/strategies/baselines/megatron_config.h"

namespace loom {
namespace {

struct VlmXl {
  ExecutionPlan exec;
  ExecutionCosts costs;
  static const VlmXl& Get() {
    static const VlmXl* x = [] {
      auto* v = new VlmXl;
      Model m = LoadModel("vlm-xl");
      Cluster c = LoadCluster("h100:2048x8");
      Workload w = LoadWorkload("obelics");
      w.global_batch = 128 * 64;
      ParallelConfig cfg;
      cfg.tp = 8;
      cfg.pp = 16;
      cfg.dp = 128;
      cfg.microbatches = 64;
      cfg.recompute = Recompute::kFull;
      const Batch batch = DrawBatch(w, 0);
      StrategyContext ctx{m, c, w, batch, {}};
      v->exec = CompilePlan(m, c, w, MegatronConfigPlan(ctx, cfg), batch);
      v->costs = PriceExecution(v->exec, m, c, batch);
      return v;
    }();
    return *x;
  }
};

// Replicas that do identical work: one replica stands for all 128 (spatial reuse).
void BM_VlmXlIdenticalReplicas(benchmark::State& state) {
  const auto& x = VlmXl::Get();
  std::vector<PipelineCosts> one = {x.costs.replicas[0]};
  SimOptions o;
  o.record_timelines = false;
  int64_t events = 0;
  for (auto _ : state) {
    Simulator s(x.exec.schedule, one, o);
    events += s.result().events;
    benchmark::DoNotOptimize(s.iteration_time_s());
  }
  state.counters["events_per_s"] = benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
  state.counters["gpus"] = 16384;
}
BENCHMARK(BM_VlmXlIdenticalReplicas)->Unit(benchmark::kMillisecond);

// 128 replicas with their own OBELICS batches, joined at the gradient sync.
void BM_VlmXlDistinctReplicas(benchmark::State& state) {
  const auto& x = VlmXl::Get();
  SimOptions o;
  o.record_timelines = false;
  int64_t events = 0;
  for (auto _ : state) {
    Simulator s(x.exec.schedule, x.costs.replicas, o);
    events += s.result().events;
    benchmark::DoNotOptimize(s.iteration_time_s());
  }
  state.counters["replicas"] = static_cast<double>(x.costs.replicas.size());
  state.counters["events_per_s"] = benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_VlmXlDistinctReplicas)->Unit(benchmark::kMillisecond);

// One replica of vlm-xl at m = 64: re-time after swapping two microbatches
// (a data reordering), incrementally versus from scratch. Arg: position of the
// swapped pair (0 = first microbatches, 62 = last).
void BM_ResimulateIncremental(benchmark::State& state) {
  const auto& x = VlmXl::Get();
  SimOptions o;
  o.record_timelines = true;
  Simulator s(x.exec.schedule, {x.costs.replicas[0]}, o);
  const int a = static_cast<int>(state.range(0));
  for (auto _ : state) {
    s.SwapMicrobatches(0, a, a + 1);
    s.Resimulate();
    benchmark::DoNotOptimize(s.iteration_time_s());
  }
}
BENCHMARK(BM_ResimulateIncremental)->Arg(0)->Arg(32)->Arg(62)->Unit(benchmark::kMicrosecond);

void BM_ResimulateFull(benchmark::State& state) {
  const auto& x = VlmXl::Get();
  SimOptions o;
  o.record_timelines = true;
  Simulator s(x.exec.schedule, {x.costs.replicas[0]}, o);
  for (auto _ : state) {
    s.SwapMicrobatches(0, 62, 63);
    s.SimulateFromScratch();
    benchmark::DoNotOptimize(s.iteration_time_s());
  }
}
BENCHMARK(BM_ResimulateFull)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace loom
