#include "loom/sim/megatron_run.h"

#include <fmt/format.h>

#include "loom/data/sample_source.h"

namespace loom {

MegatronRun RunMegatron(const Model& model, const Cluster& cluster, const Workload& workload,
                        const ParallelConfig& config, int64_t iteration) {
  config.Validate(model, cluster, workload);
  Batch batch = DrawBatch(workload, iteration);
  MegatronRun run;
  run.sim = BuildMegatronSimulation(model, cluster, workload, config, batch);
  Simulator simulator(run.sim.schedule, run.sim.replicas, config.sim);
  run.result = simulator.result();
  run.stage_labels = StageLabels(model, run.sim);
  const int p = run.sim.schedule.num_ranks;
  for (int i = 0; i < run.result.num_ranks(); ++i) {
    run.gpu_names.push_back(run.sim.replicas.size() == 1
                                ? fmt::format("pp{} (all {} dp replicas)", i % p, config.dp)
                                : fmt::format("replica {} pp{}", i / p, i % p));
  }
  CheckMemoryFits(run.result, run.sim, cluster, run.stage_labels);
  double tokens = 0;
  for (const auto& t : CountModuleTokens(model, batch.samples)) {
    tokens = std::max(tokens, t.tokens);
  }
  // Tokens per second counts the busiest module's tokens (the LLM's for a VLM).
  run.metrics = ComputeMetrics(run.result, run.sim, cluster, workload, tokens);
  return run;
}

}  // namespace loom
