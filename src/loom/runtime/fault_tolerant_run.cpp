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
  std::ifstream in(path);
  if (!in) throw Error(fmt::format("--resume {}: no {} (write one with a fault-tolerant run that stops)", dir, path));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw Error(fmt::format("{}: not JSON: {}", path, e.what()));
  }
  CheckpointManifest m;
  try {
    if (j.at("format").get<std::string>() != "loom-checkpoint-1") {
      throw Error(fmt::format("{}: field format is '{}'; valid: loom-checkpoint-1", path, j.at("format").dump()));
    }
    m.steps_done = j.at("steps_done").get<int>();
    m.model = j.at("model").get<std::string>();
    m.seed = j.at("seed").get<uint64_t>();
    m.layers = j.at("layers").get<std::vector<std::string>>();
    m.outcome = j.value("outcome", "");
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(fmt::format("{}: {} (fields: format, steps_done, model, seed, layers)", path, e.what()));
  }
  if (m.model != model.name) {
    throw Error(fmt::format("{}: field model is {}, but the run trains {}", path, m.model, model.name));
  }
  if (m.seed != workload.seed) {
    throw Error(
        fmt::format("{}: field seed is {}, but the workload's seed is {} (its frozen layers and samples would "
                    "differ)",
                    path, m.seed, workload.seed));
  }
  if (m.steps_done < 0) throw Error(fmt::format("{}: field steps_done is {}; valid: >= 0", path, m.steps_done));
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
  CheckFaultTolerable(model, plan);
  int first_step = 0;
  if (!options.resume_from.empty()) {
    first_step = ReadCheckpoint(options.resume_from, model, workload).steps_done;
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
