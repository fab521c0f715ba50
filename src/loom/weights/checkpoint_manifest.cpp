#include "loom/weights/checkpoint_manifest.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <set>

#include "loom/error.h"

namespace loom {

std::string CheckpointManifestText(const CheckpointManifest& m) {
  const nlohmann::json j = {
      {"format", kCheckpointFormat}, {"steps_done", m.steps_done}, {"model", m.model}, {"seed", m.seed},
      {"layers", m.layers},          {"outcome", m.outcome}};
  return j.dump(2) + "\n";
}

namespace {

const nlohmann::json& Field(const nlohmann::json& j, const char* key, const std::string& path) {
  if (!j.contains(key)) {
    throw Error(fmt::format("{}: field {} is missing (fields: format, steps_done, model, seed, layers)", path, key));
  }
  return j.at(key);
}

std::string StringField(const nlohmann::json& j, const char* key, const std::string& path) {
  const nlohmann::json& v = Field(j, key, path);
  if (!v.is_string()) throw Error(fmt::format("{}: field {} is {}; expected a string", path, key, v.dump()));
  return v.get<std::string>();
}

}  // namespace

CheckpointManifest ParseCheckpointManifest(const std::string& text, const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: not JSON: {}", path, e.what()));
  }
  if (!j.is_object()) throw Error(fmt::format("{}: expected a JSON object (a checkpoint manifest)", path));
  if (const std::string format = StringField(j, "format", path); format != kCheckpointFormat) {
    throw Error(fmt::format("{}: field format is '{}'; valid: {}", path, format, kCheckpointFormat));
  }
  CheckpointManifest m;
  const nlohmann::json& steps = Field(j, "steps_done", path);
  if (!steps.is_number_integer() || steps.get<int64_t>() < 0 || steps.get<int64_t>() > (int64_t{1} << 30)) {
    throw Error(fmt::format("{}: field steps_done is {}; valid: a whole number of steps >= 0", path, steps.dump()));
  }
  m.steps_done = static_cast<int>(steps.get<int64_t>());
  m.model = StringField(j, "model", path);
  const nlohmann::json& seed = Field(j, "seed", path);
  if (!seed.is_number_unsigned() && !(seed.is_number_integer() && seed.get<int64_t>() >= 0)) {
    throw Error(fmt::format("{}: field seed is {}; valid: a whole number >= 0", path, seed.dump()));
  }
  m.seed = seed.get<uint64_t>();
  const nlohmann::json& layers = Field(j, "layers", path);
  if (!layers.is_array())
    throw Error(fmt::format("{}: field layers is {}; expected a list of names", path, layers.dump()));
  std::set<std::string> seen;
  for (size_t i = 0; i < layers.size(); ++i) {
    const nlohmann::json& l = layers[i];
    // A layer names the file LAYER.pt beside the manifest: never a path.
    if (!l.is_string() || l.get<std::string>().empty() || l.get<std::string>().find('/') != std::string::npos ||
        l.get<std::string>().find('\0') != std::string::npos || l == "." || l == "..") {
      throw Error(fmt::format("{}: layers[{}] is {}; valid: a layer's file name, MODULE_LAYER", path, i, l.dump()));
    }
    if (!seen.insert(l.get<std::string>()).second) {
      throw Error(fmt::format("{}: layers[{}] {} is listed twice", path, i, l.dump()));
    }
    m.layers.push_back(l.get<std::string>());
  }
  if (j.contains("outcome")) m.outcome = StringField(j, "outcome", path);
  return m;
}

}  // namespace loom
