#include "loom/session/problem_loading.h"

#include <fmt/format.h>

#include "loom/cost/cost_model.h"
#include "loom/data/sample_modalities.h"
#include "loom/data/sample_source.h"
#include "loom/error.h"

namespace loom {

Cluster LoadClusterWithProfile(const std::string& name, const std::string& profile) {
  Cluster cluster = LoadCluster(name);
  ApplyCostModel(cluster, profile);
  return cluster;
}

Workload ApplyWorkloadOverrides(Workload workload, const WorkloadOverrides& overrides) {
  if (overrides.global_batch && *overrides.global_batch > kMaxGlobalBatch) {
    throw Error(fmt::format("--global-batch: at most {} samples per iteration, got {}", kMaxGlobalBatch,
                            *overrides.global_batch));
  }
  if (overrides.global_batch) workload.global_batch = *overrides.global_batch;
  if (overrides.seed) workload.seed = *overrides.seed;
  if (overrides.precision) workload.precision = *overrides.precision;
  if (overrides.zero_stage) {
    if (*overrides.zero_stage < 0 || *overrides.zero_stage > 3) {
      throw Error(
          fmt::format("--zero-stage {}: valid: 0 (none), 1 (optimizer state), 2 (+ gradients), 3 "
                      "(+ weights, FSDP)",
                      *overrides.zero_stage));
    }
    workload.zero_stage = *overrides.zero_stage;
  }
  if (overrides.seq_len) {
    if (workload.source.kind != "text") {
      throw Error(fmt::format("--seq-len applies to the `text` workload, not '{}'", workload.name));
    }
    workload.source.seq_len = *overrides.seq_len;
  }
  return workload;
}

Workload LoadWorkloadWithOverrides(const Model& model, const std::string& name, const WorkloadOverrides& overrides) {
  Workload w = ApplyWorkloadOverrides(name.empty() ? DefaultWorkload(model) : LoadWorkload(name), overrides);
  // A named synthetic source's first batch shows what its samples carry (a
  // JSONL file is read whole where it is used, not here a second time).
  if (!name.empty() && w.source.kind != "jsonl") {
    CheckModelReadsSamples(model, DrawBatch(w, 0), fmt::format("workload {}", w.name));
  }
  return w;
}

}  // namespace loom
