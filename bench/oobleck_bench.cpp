// Oobleck's planner (issue 17; thesis Table 2.3): the latency of planning one
// pipeline template for N nodes of M GPUs and L layers (paper: 0.28 s at 8 x 1
// x 24 up to 3297.92 s at 24 x 8 x 96; goal < 10 s on 2 cores), a fresh
// planner each iteration (no memo carried over), and the whole set of
// templates n0 .. N - f n0 with one shared memo. Layer times are synthetic
// (a transformer layer's work split over d GPUs with a fixed overhead).
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>

#include "loom/strategies/oobleck/template_planner.h"

namespace loom::oobleck {
namespace {

LayerCosts SyntheticTimes(int layers, int gpus) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> jitter(0.9, 1.1);
  LayerCosts t;
  for (int l = 0; l < layers; ++l) {
    const double w = 10e-3 * jitter(rng);
    t.time_s.emplace_back();
    for (int d = 1; d <= gpus; ++d) t.time_s.back().push_back(w / d + 0.2e-3);
  }
  return t;
}

// args: nodes, GPUs per node, layers.
void BM_OobleckOneTemplate(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0)), gpus = static_cast<int>(state.range(1)),
            layers = static_cast<int>(state.range(2));
  const LayerCosts times = SyntheticTimes(layers, gpus);
  PipelineTemplate t;
  int64_t entries = 0;
  for (auto _ : state) {
    TemplatePlanner planner(times, gpus);
    t = planner.Plan(nodes);
    entries = planner.memo_entries();
    benchmark::DoNotOptimize(t);
  }
  state.counters["stages"] = t.num_stages();
  state.counters["subproblems"] = static_cast<double>(entries);
}
BENCHMARK(BM_OobleckOneTemplate)
    ->ArgsProduct({{8, 16, 24}, {1, 4, 8}, {24, 32, 64, 96}})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

// Every template of a 24-node cluster at f = 2, n0 = 2 (templates 2 .. 20
// nodes), one memo: later templates reuse the earlier ones' sub-problems.
void BM_OobleckAllTemplates24x8x96(benchmark::State& state) {
  const LayerCosts times = SyntheticTimes(96, 8);
  for (auto _ : state) {
    TemplatePlanner planner(times, 8);
    for (int n = 2; n <= 20; ++n) benchmark::DoNotOptimize(planner.Plan(n));
  }
}
BENCHMARK(BM_OobleckAllTemplates24x8x96)->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace
}  // namespace loom::oobleck
