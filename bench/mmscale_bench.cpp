// MMScale's speed goals (issue 5; paper Tables 2 and 3): Alg. 1 allocation for
// 1296 GPUs at global batch 1920 (paper 922 ms, goal < 10 ms), intra-microbatch
// reordering of 1920 samples over 30 DP groups (paper 1.82 ms, goal < 0.1 ms)
// and inter-microbatch reordering at encoder DP 30 (paper 5.87 ms, goal
// < 0.5 ms): 30 pipelines of 64 microbatches, each 12 stages deep (encoder,
// 10 backbone stages, generator).
#include <benchmark/benchmark.h>

#include <random>

#include "loom/data/sample_source.h"
#include "loom/strategies/mmscale/inter_reorder.h"
#include "loom/strategies/mmscale/intra_reorder.h"
#include "loom/strategies/mmscale/mmscale.h"

namespace loom {
namespace {

void BM_MmscaleAllocation(benchmark::State& state) {
  const Model model = LoadModel("mllm-72b");
  const Cluster cluster = LoadCluster("mmscale-cluster");
  Workload w = LoadWorkload("laion");
  w.global_batch = 1920;
  const Batch batch = DrawBatch(w, 0);
  StrategyContext ctx{model, cluster, w, batch, {}};
  const MmscaleUnits units = SplitMmscaleUnits(model);
  const AllocationProblem problem = MakeAllocationProblem(ctx, units, Recompute::kSelective);
  double t = 0;
  for (auto _ : state) {
    auto a = AllocateResources(problem, 1);
    t = a.empty() ? -1 : a[0].iteration_s();
    benchmark::DoNotOptimize(a);
  }
  state.counters["T_iter_s"] = t;
}
BENCHMARK(BM_MmscaleAllocation)->Unit(benchmark::kMillisecond);

std::vector<double> SkewedSizes(int n, unsigned seed) {
  std::mt19937 rng(seed);
  std::lognormal_distribution<double> d(0.0, 1.0);
  std::vector<double> s(n);
  for (auto& x : s) x = d(rng);
  return s;
}

void BM_MmscaleIntraReorder(benchmark::State& state) {
  const auto sizes = SkewedSizes(1920, 1);
  const std::vector<int> caps(30, 64);
  for (auto _ : state) benchmark::DoNotOptimize(IntraReorder(sizes, caps));
}
BENCHMARK(BM_MmscaleIntraReorder)->Unit(benchmark::kMicrosecond);

void BM_MmscaleInterReorder(benchmark::State& state) {
  const int replicas = 30, l = 64, stages = 12;
  std::vector<std::vector<MicrobatchTimes>> pipelines(replicas);
  for (int r = 0; r < replicas; ++r) {
    const auto enc = SkewedSizes(2 * l, 100 + r);
    for (int k = 0; k < l; ++k) {
      MicrobatchTimes m;
      for (int s = 0; s < stages; ++s) {
        const double f = s == 0 ? enc[k] : (s == stages - 1 ? enc[l + k] : 1.0);
        m.forward_s.push_back(f);
        m.backward_s.push_back(2 * f);
      }
      pipelines[r].push_back(m);
    }
  }
  for (auto _ : state) {
    const PipelineShape shape(stages, l);  // one shape serves every DP rank's pipeline
    for (const auto& p : pipelines) benchmark::DoNotOptimize(InterReorder(p, shape));
  }
}
BENCHMARK(BM_MmscaleInterReorder)->Unit(benchmark::kMicrosecond);

void BM_MmscaleStrategy(benchmark::State& state) {
  const Model model = LoadModel("mllm-9b");
  const Cluster cluster = MakeCluster("a800", 12, 8);
  Workload w = LoadWorkload("laion");
  w.global_batch = 128;
  const Batch batch = DrawBatch(w, 0);
  StrategyContext ctx{model, cluster, w, batch, {}};
  int candidates = 0;
  for (auto _ : state) candidates = RunStrategy("mmscale", ctx).candidates;
  state.counters["candidates"] = candidates;
}
BENCHMARK(BM_MmscaleStrategy)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace loom
