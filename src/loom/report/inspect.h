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
  // Instead of the workload's samples: one sample holding one image of this
  // width x height in pixels and no text (`loom inspect --image WxH`): each
  // module's tokens and sequences for that image, tilings included.
  std::optional<std::pair<int64_t, int64_t>> image_px;
};

// {"model", "params", "workload", "samples"[, "image_px": [w, h]][, "planning_only"], "modules": [{"name",
//   "role", "modality", "layers", "hidden", "params", "frozen", "tokens", "sequences", "fwd_flops",
//   "compute_intensity"[, "fwd_time_s"]}]} (tokens, sequences, FLOPs and time per sample)
nlohmann::json InspectModel(const Model& model, const InspectOptions& options);
std::string FormatInspect(const nlohmann::json& inspect);

}  // namespace loom
