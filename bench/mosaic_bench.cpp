// Mosaic's solver (issue 16; paper §5.3.3): the 10-module OFASys-shaped model
// (examples/mosaic/ofasys-10.yaml) at 10% SM granularity on 8 H100s (paper
// 15.87 s; goal < 1 s), each solver ablation, and the optimality of GAHC
// against exhaustive search over stage partitions on random 8-module
// instances (paper: 94.27% median at 10 modules).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "loom/cost/cost_model.h"
#include "loom/data/sample_source.h"
#include "loom/spec/cluster.h"
#include "loom/strategies/mosaic/mosaic.h"

namespace loom {
namespace {

void Solve(benchmark::State& state, MosaicOptions options) {
  const Model model = LoadModel(std::string(LOOM_SOURCE_DIR) + "/examples/mosaic/ofasys-10.yaml");
  Cluster cluster = MakeCluster("h100", 1, 8);
  ApplyCostModel(cluster, "default");
  Workload w = LoadWorkload("mosaic-fixed");
  w.global_batch = 32;
  const Batch batch = DrawBatch(w, 0);
  StrategyContext ctx{model, cluster, w, batch, {}};
  MosaicSolution sol;
  for (auto _ : state) {
    sol = SolveMosaic(ctx, options);
    benchmark::DoNotOptimize(sol);
  }
  state.counters["T_iter_s"] = sol.mapping.time_s;
  state.counters["evals"] = sol.evaluations;
  state.counters["cbc"] = sol.milp_solves;
}

void BM_MosaicOfasys10(benchmark::State& state) { Solve(state, {}); }
void BM_MosaicOfasys10NoCache(benchmark::State& state) {
  MosaicOptions o;
  o.stage.cache = false;
  Solve(state, o);
}
void BM_MosaicOfasys10NoPrune(benchmark::State& state) {
  MosaicOptions o;
  o.mapping.early_prune = false;
  Solve(state, o);
}
void BM_MosaicOfasys10Granularity5(benchmark::State& state) {
  MosaicOptions o;
  o.granularity = 0.05;
  Solve(state, o);
}
BENCHMARK(BM_MosaicOfasys10)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MosaicOfasys10NoCache)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MosaicOfasys10NoPrune)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MosaicOfasys10Granularity5)->Unit(benchmark::kMillisecond);

// Random surfaces (latency ~ work / (dp * SM share) + sync, launch floors),
// random DAGs; the median and worst ratio exhaustive / GAHC over 20 instances.
void BM_MosaicGahcOptimality(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0)), gpus = 8;
  std::vector<double> ratios;
  for (auto _ : state) {
    ratios.clear();
    for (int trial = 0; trial < 20; ++trial) {
      std::mt19937 rng(100 + trial);
      std::uniform_real_distribution<double> work(0.005, 0.2), floor(0.0, 0.02);
      std::vector<mosaic::ModuleSurface> surfaces;
      for (int i = 0; i < n; ++i) {
        mosaic::ModuleSurface s;
        s.module = "m" + std::to_string(i);
        s.index = i;
        const double wk = work(rng), fl = floor(rng);
        for (int d = 1; d <= gpus; d *= 2) {
          for (int sms : {16, 32, 48, 64, 80, 96, 112, 132}) {
            mosaic::SurfacePoint p;
            p.dp = d;
            p.sms = sms;
            p.latency_s = std::max(fl, wk / d * (0.4 + 0.6 * 132.0 / sms)) + 0.002 * (d > 1 ? std::log2(d) : 0);
            p.launch_floor_s = fl;
            p.mem_bytes = 1e9;
            s.points.push_back(p);
          }
        }
        surfaces.push_back(s);
      }
      std::vector<std::vector<int>> deps(n);
      for (int m = 1; m < n; ++m) {
        if (rng() % 3 == 0) deps[m].push_back(static_cast<int>(rng() % m));
      }
      SmSharing host;
      host.launch_floor_s_per_layer = 1;
      SmPartitionRules rules;
      rules.partitionable_sms = 120;
      mosaic::StageEvaluator eval(surfaces, gpus, 80e9, rules, host);
      eval.ReserveOthers(false);
      mosaic::MappingOptions paper;
      paper.refine = state.range(1) != 0;
      const double g = mosaic::SolveGahc(deps, eval, paper).time_s;
      const double e = mosaic::SolveExhaustive(deps, eval).time_s;
      ratios.push_back(e / g);
    }
  }
  std::sort(ratios.begin(), ratios.end());
  state.counters["median_ratio"] = ratios[ratios.size() / 2];
  state.counters["worst_ratio"] = ratios.front();
}
BENCHMARK(BM_MosaicGahcOptimality)
    ->Args({6, 0})
    ->Args({6, 1})
    ->Args({8, 0})
    ->Args({8, 1})
    ->Args({10, 0})
    ->Args({10, 1})
    ->Iterations(1)
    ->Unit(benchmark::kSecond);

}  // namespace
}  // namespace loom
