// Speed of the spec and cost steps that planners call in their inner loops.
#include <benchmark/benchmark.h>

#include "loom/cost/device_time.h"
#include "loom/cost/layer_work.h"
#include "loom/cost/token_stats.h"
#include "loom/data/sample_source.h"
#include "loom/spec/model.h"

namespace loom {
namespace {

// Pricing one layer for one microbatch: the innermost call of every search.
void BM_LayerWorkAndTime(benchmark::State& state) {
  Model m = LoadModel("vlm-s");
  const Layer& layer = m.modules[2].layers[1];
  TokenStats t{8192, 8 * 1024.0 * 1024, 8, 0, 0};
  GpuSpec gpu = FindGpu("h800");
  Efficiency eff;
  for (auto _ : state) {
    LayerWork w = EstimateLayerWork(layer, t, 4);
    benchmark::DoNotOptimize(PhaseTime_s(w, Phase::kForward, gpu, eff) +
                             PhaseTime_s(w, Phase::kBackwardData, gpu, eff));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_LayerWorkAndTime);

// Token statistics of a whole OBELICS global batch through vlm-s.
void BM_CountTokensGlobalBatch(benchmark::State& state) {
  Model m = LoadModel("vlm-s");
  Workload w = LoadWorkload("obelics");
  w.global_batch = state.range(0);
  Batch b = DrawBatch(w, 0);
  for (auto _ : state) {
    benchmark::DoNotOptimize(CountModuleTokens(m, b.samples));
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_CountTokensGlobalBatch)->Arg(128)->Arg(1024);

// Drawing a global batch of synthetic samples.
void BM_DrawObelicsBatch(benchmark::State& state) {
  Workload w = LoadWorkload("obelics");
  w.global_batch = state.range(0);
  int64_t it = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(DrawBatch(w, it++));
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_DrawObelicsBatch)->Arg(1024);

// Loading a composition from the embedded zoo (YAML parse + `from:` resolution).
void BM_LoadModel(benchmark::State& state) {
  for (auto _ : state) {
    benchmark::DoNotOptimize(LoadModel("mllm-72b"));
  }
}
BENCHMARK(BM_LoadModel);

}  // namespace
}  // namespace loom
