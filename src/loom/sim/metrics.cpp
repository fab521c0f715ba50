#include "loom/sim/metrics.h"

#include <fmt/format.h>

#include "loom/error.h"
#include "loom/report/table.h"

namespace loom {

IterationMetrics ComputeMetrics(const SimResult& r, const MegatronSimulation& sim, const Cluster& c,
                                const Workload& w, double batch_tokens) {
  IterationMetrics m;
  m.iteration_time_s = r.iteration_time_s;
  m.mfu = sim.model_flops / (r.iteration_time_s * sim.num_gpus * c.gpu.peak_flops);
  m.peak_mem_bytes = r.max_peak_mem_bytes();
  const int p = sim.schedule.num_ranks;
  double busy = 0, weight = 0;
  for (int rep = 0; rep < static_cast<int>(sim.replicas.size()); ++rep) {
    for (int rank = 0; rank < p; ++rank) {
      busy += sim.replica_weight[rep] * r.busy_s[rep * p + rank];
      weight += sim.replica_weight[rep];
    }
  }
  m.bubble_ratio = 1.0 - busy / (weight * r.iteration_time_s);
  m.throughput_samples_per_s = static_cast<double>(w.global_batch) / r.iteration_time_s;
  m.throughput_tokens_per_s = batch_tokens / r.iteration_time_s;
  return m;
}

void CheckMemoryFits(const SimResult& r, const MegatronSimulation& sim, const Cluster& c,
                     const std::vector<std::string>& labels) {
  const int p = sim.schedule.num_ranks;
  const double cap = static_cast<double>(c.gpu.mem_bytes);
  int worst = -1;
  for (int i = 0; i < r.num_ranks(); ++i) {
    if (r.peak_mem_bytes[i] > cap && (worst < 0 || r.peak_mem_bytes[i] > r.peak_mem_bytes[worst])) worst = i;
  }
  if (worst < 0) return;
  const int rank = worst % p;
  std::string stages;
  for (int v = 0; v < sim.schedule.num_stages(); ++v) {
    if (sim.schedule.stage_rank[v] == rank) stages += (stages.empty() ? "" : ", ") + labels[v];
  }
  throw Error(fmt::format("does not fit in memory: the GPUs of pipeline rank {} (stages {}) peak at {}, {} over "
                          "the {} of an {}; use more pipeline or tensor parallelism, recomputation, a higher "
                          "ZeRO stage or smaller microbatches",
                          rank, stages, HumanBytes(r.peak_mem_bytes[worst]), HumanBytes(r.peak_mem_bytes[worst] - cap),
                          HumanBytes(cap), c.gpu.name));
}

}  // namespace loom
