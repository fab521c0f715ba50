// Entrain (issue 19): what its online part costs per iteration (the thesis
// runs it off the critical path, before sequence packing) and what its
// planner costs once: pairwise deferral of one replica's K = 32 microbatches,
// the whole per-batch schedule of 512 samples on 4 replicas (DP-level and
// stratified assignment, deferral, the deferral-aware orders), compiling and
// simulating that batch, and the planner (Algorithms 2 and 3 with the
// simulator's confirmation) on entrain-3b / SynthChartNet at 64 A40s.
#include <benchmark/benchmark.h>

#include <random>

#include "loom/data/sample_source.h"
#include "loom/sim/plan_run.h"
#include "loom/spec/cluster.h"
#include "loom/spec/model.h"
#include "loom/spec/workload.h"
#include "loom/strategies/entrain/deferral.h"
#include "loom/strategies/entrain/entrain.h"

namespace loom {
namespace {

struct Setup {
  Model model = LoadModel("entrain-3b");
  Cluster cluster = MakeCluster("a40", 16, 4);
  Workload workload = LoadWorkload("synthchartnet");
  Batch batch = DrawBatch(workload, 0);
  StrategyContext ctx() {
    StrategyContext c{model, cluster, workload, batch, {}};
    c.fixed_dp = 4;
    c.fixed_tp = 2;
    return c;
  }
};

Setup& Shared() {
  static Setup s;
  return s;
}

void BM_PairwiseDeferral(benchmark::State& state) {
  const int K = static_cast<int>(state.range(0));
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(0.01, 0.2);
  std::vector<double> llm(4 * K);
  for (double& x : llm) x = u(rng);
  std::vector<std::vector<int>> mbs(K);
  for (int i = 0; i < 4 * K; ++i) mbs[i % K].push_back(i);
  for (auto _ : state) benchmark::DoNotOptimize(PairwiseDeferral(mbs, llm));
}
BENCHMARK(BM_PairwiseDeferral)->Arg(8)->Arg(32)->Arg(128)->Unit(benchmark::kMicrosecond);

void BM_EntrainScheduleBatch(benchmark::State& state) {
  Setup& s = Shared();
  const StrategyResult r = RunStrategy("entrain", s.ctx());
  const LayerCurves curves = FitModelCurves(s.model, s.cluster, ModuleTensorParallel(s.model, r.plan));
  for (auto _ : state) benchmark::DoNotOptimize(EntrainScheduleBatch(s.model, r.plan, s.batch, 0, curves));
}
BENCHMARK(BM_EntrainScheduleBatch)->Unit(benchmark::kMillisecond);

void BM_EntrainSimulateBatch(benchmark::State& state) {
  Setup& s = Shared();
  const StrategyResult r = RunStrategy("entrain", s.ctx());
  const LayerCurves curves = FitModelCurves(s.model, s.cluster, ModuleTensorParallel(s.model, r.plan));
  const IterationSchedule it = EntrainScheduleBatch(s.model, r.plan, s.batch, 0, curves);
  SimOptions opt;
  opt.record_timelines = false;
  for (auto _ : state) benchmark::DoNotOptimize(RunPlan(s.model, s.cluster, s.workload, r.plan, s.batch, &it, opt));
}
BENCHMARK(BM_EntrainSimulateBatch)->Unit(benchmark::kMillisecond);

void BM_EntrainPlan(benchmark::State& state) {
  Setup& s = Shared();
  for (auto _ : state) benchmark::DoNotOptimize(RunStrategy("entrain", s.ctx()));
}
BENCHMARK(BM_EntrainPlan)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace loom
