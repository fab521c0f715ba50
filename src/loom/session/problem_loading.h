// Loading what a command plans for from the names a user gives: the cluster
// priced by a cost model, and a workload with the user's overrides applied.
// `loom`'s flags (cli/common_flags.h) and the Python module's arguments
// (python/loom_module.cpp) both come here, so that both read names alike.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "loom/spec/cluster.h"
#include "loom/spec/model.h"
#include "loom/spec/precision.h"
#include "loom/spec/workload.h"

namespace loom {

// The cluster `name` (GPU:NODESxPER_NODE, testbed or YAML file) priced by
// `profile`: "default" (the GPU's shipped measured profile, else the
// roofline), "roofline", or a profile YAML file (cost/cost_model.h's
// ApplyCostModel). Throws loom::Error for an unknown cluster or profile.
Cluster LoadClusterWithProfile(const std::string& name, const std::string& profile);

// What a user may change of a workload; each absent field keeps the workload's own value.
struct WorkloadOverrides {
  std::optional<int64_t> global_batch;  // samples per iteration; at most kMaxGlobalBatch
  std::optional<uint64_t> seed;         // of the sample draw
  std::optional<int64_t> seq_len;       // tokens per sample; only the `text` source has one
  std::optional<Precision> precision;
  std::optional<int> zero_stage;  // ZeRO stage of the plans' data parallelism, 0..3

  bool any() const { return global_batch || seed || seq_len || precision || zero_stage; }
};

// `workload` with `overrides` applied. Throws loom::Error, naming the `loom`
// flag (--global-batch, --seq-len), for a global batch past kMaxGlobalBatch
// and for a sequence length on a workload whose source is not `text`.
Workload ApplyWorkloadOverrides(Workload workload, const WorkloadOverrides& overrides);

// The workload `name` (built-in or YAML file), else, for an empty name,
// `model`'s default one, with `overrides` applied (ApplyWorkloadOverrides):
// what `loom plan`, `simulate`, `replay` and `run` plan for from their
// workload flags, and the Python module from its arguments.
Workload LoadWorkloadWithOverrides(const Model& model, const std::string& name, const WorkloadOverrides& overrides);

}  // namespace loom
