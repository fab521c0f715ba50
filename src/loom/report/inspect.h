// What `loom models` and `loom inspect` print, as library calls: a user who
// wants the same numbers in a script calls these, not the CLI.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "loom/spec/cluster.h"
#include "loom/spec/model.h"
#include "loom/spec/workload.h"

namespace loom {

// One line per zoo model: name, modules, parameters, description.
std::string FormatModelList();

struct InspectOptions {
  std::optional<Workload> workload;  // default: DefaultWorkload(model)
  std::optional<Cluster> cluster;    // adds a per-sample forward time on one of its GPUs
  int max_samples = 64;              // FLOPs are the mean over this many samples of iteration 0
};

// {"model", "params", "workload", "samples", "modules": [{"name", "role", "modality", "layers",
//   "hidden", "params", "frozen", "fwd_flops", "compute_intensity"[, "fwd_time_s"]}]}
nlohmann::json InspectModel(const Model& model, const InspectOptions& options);
std::string FormatInspect(const nlohmann::json& inspect);

}  // namespace loom
