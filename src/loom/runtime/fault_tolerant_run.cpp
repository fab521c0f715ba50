#include "loom/runtime/fault_tolerant_run.h"

#include <dirent.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "loom/error.h"
#include "loom/input_file.h"
#include "loom/path_kind.h"
#include "loom/plan/plan_json.h"
#include "loom/runtime/checkpoint_dir.h"
#include "loom/runtime/generation_controller.h"
#include "loom/runtime/worker.h"

namespace loom::runtime {

// The trainable layers of `model` ("{module}_{layer}") that `layers` does not
// list: frozen ones come from the seed, every other one must be saved.
std::vector<std::string> UnlistedTrainableLayers(const Model& model, const std::vector<std::string>& layers) {
  std::vector<std::string> out;
  for (const auto& mod : model.modules) {
    for (size_t l = 0; l < mod.layers.size(); ++l) {
      const std::string name = fmt::format("{}_{}", mod.name, l);
      if (!mod.layers[l].frozen && std::find(layers.begin(), layers.end(), name) == layers.end()) {
        out.push_back(name);
      }
    }
  }
  return out;
}

CheckpointManifest ReadCheckpoint(const std::string& dir, const Model& model, const Workload& workload) {
  const std::string path = dir + "/checkpoint.json";
  const char* written_by = "a fault-tolerant run that stops, or one with --checkpoint DIR --checkpoint-every N";
  if (KindOfPath(dir) != PathKind::kDirectory) {
    throw Error(fmt::format("--resume {}: no such folder; valid: a checkpoint folder, written by {}", dir, written_by));
  }
  if (KindOfPath(path) == PathKind::kNone) {
    throw Error(fmt::format("--resume {}: no {} in it (written by {})", dir, path, written_by));
  }
  const CheckpointManifest m = ParseCheckpointManifest(ReadInputFile(path, "checkpoint manifest", kMaxSpecBytes), path);
  if (m.model != model.name) {
    throw Error(fmt::format("{}: field model is {}, but the run trains {}", path, m.model, model.name));
  }
  if (m.seed != workload.seed) {
    throw Error(
        fmt::format("{}: field seed is {}, but the workload's seed is {} (its frozen layers and samples would "
                    "differ)",
                    path, m.seed, workload.seed));
  }
  // The layer files a resume reads are the ones the manifest lists, and it
  // must list every trainable layer (frozen ones come from the seed): files a
  // folder holds beside them may be another run's (checkpoint_dir.h).
  if (const auto unlisted = UnlistedTrainableLayers(model, m.layers); !unlisted.empty()) {
    throw Error(fmt::format("{}: field layers does not list {} (trainable layers of {}); the checkpoint is incomplete",
                            path, fmt::join(unlisted, ", "), model.name));
  }
  return m;
}

RunResult RunFaultTolerant(const Model& model, const Cluster& cluster, const Workload& workload, const Plan& plan,
                           const RunOptions& options, const Replanner& replanner) {
  options.Validate();
  // The checkpoint first: a folder that is not one is the cause to name.
  int first_step = 0;
  if (!options.resume_from.empty()) first_step = ReadCheckpoint(options.resume_from, model, workload).steps_done;
  CheckFaultTolerable(model, plan,
                      options.resume_from.empty() ? "--fault-tolerance"
                                                  : "--resume " + options.resume_from + " (resumes fault-tolerantly)");
  if (!options.resume_from.empty()) {
    if (first_step >= options.steps) {
      throw Error(fmt::format("--resume {}: the checkpoint is after step {}; --steps {} leaves nothing to run",
                              options.resume_from, first_step, options.steps));
    }
  }
  for (const auto& k : options.kills) {
    if (k.step < 0 || k.step >= options.steps || k.after_actions < 0 || k.process < 0) {
      throw Error(fmt::format("--kill {}:{}:{}: valid: a process >= 0, a step in 0..{}, actions >= 0", k.process,
                              k.step, k.after_actions, options.steps - 1));
    }
  }
  for (const auto& j : options.rejoins) {
    if (j.node < 0 || j.node >= cluster.nodes || j.step < 1 || j.step >= options.steps) {
      throw Error(fmt::format("--rejoin {}:{}: valid: a node in 0..{} and a step in 1..{}", j.node, j.step,
                              cluster.nodes - 1, options.steps - 1));
    }
  }
  GenerationController controller(model, cluster, workload, plan, options, replanner, first_step);
  return controller.Run();
}

}  // namespace loom::runtime
