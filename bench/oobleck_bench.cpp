// Oobleck's planner (issue 17; thesis Table 2.3): the latency of planning one
// pipeline template for N nodes of M GPUs and L layers (paper: 0.28 s at 8 x 1
// x 24 up to 3297.92 s at 24 x 8 x 96; goal < 10 s on 2 cores), a fresh
// planner each iteration (no memo carried over), and the whole set of
// templates n0 .. N - f n0 with one shared memo. Layer times are synthetic
// (a transformer layer's work split over d GPUs with a fixed overhead).
#include <benchmark/benchmark.h>

#include <algorithm>
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

// Divide and conquer against brute force (every partition) on random
// instances larger than the test's: args layers, nodes, GPUs per node; 20
// seeded instances; the median and worst optimality ratio.
void BM_OobleckOptimality(benchmark::State& state) {
  const int layers = static_cast<int>(state.range(0)), nodes = static_cast<int>(state.range(1)),
            gpus = static_cast<int>(state.range(2));
  std::vector<double> ratios;
  for (auto _ : state) {
    std::mt19937 rng(11);
    std::uniform_real_distribution<double> work(0.5, 3.0), a(0.6, 1.0), over(0.0, 0.2);
    for (int i = 0; i < 20; ++i) {
      LayerCosts t;
      for (int l = 0; l < layers; ++l) {
        const double w = work(rng), e = a(rng), o = over(rng);
        t.time_s.emplace_back();
        for (int d = 1; d <= gpus; ++d) t.time_s.back().push_back(w / std::pow(d, e) + o);
      }
      TemplatePlanner planner(t, gpus);
      const double got = planner.Plan(nodes).planned_s;
      ratios.push_back(BruteForceTemplate(t, nodes, gpus).planned_s / got);
    }
  }
  std::sort(ratios.begin(), ratios.end());
  state.counters["median_ratio"] = ratios[ratios.size() / 2];
  state.counters["worst_ratio"] = ratios.front();
  state.counters["optimal"] =
      static_cast<double>(std::count_if(ratios.begin(), ratios.end(), [](double r) { return r > 1 - 1e-9; }));
}
BENCHMARK(BM_OobleckOptimality)
    ->Args({8, 3, 2})
    ->Args({10, 3, 3})
    ->Args({12, 2, 4})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

}  // namespace
}  // namespace loom::oobleck
