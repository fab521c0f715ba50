// Reading Hugging Face config.json files (spec/hf_config.h): a checked view
// of one (sub-)config with its Transformers class's defaults, and the YAML
// each family's parts become. Shared by the dispatcher (spec/hf_config.cpp)
// and the newer VLM families (spec/hf/vlm_families.cpp). Internal to spec/.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "loom/error.h"

namespace loom::hf {

using nlohmann::json;

constexpr int64_t kMaxField = int64_t{1} << 24;  // every width, count and vocabulary, as spec/ bounds them

// One (sub-)config with the defaults of the Transformers config class it
// stands for; every read names `file` and the field's dotted path.
class Cfg {
 public:
  Cfg(const json& j, std::string file, std::string path, std::map<std::string, int64_t> defaults)
      : j_(j), file_(std::move(file)), path_(std::move(path)), defaults_(std::move(defaults)) {}
  // A view of its own copy (a sub-config with fields dropped or defaulted).
  Cfg(std::shared_ptr<const json> owned, std::string file, std::string path, std::map<std::string, int64_t> defaults)
      : owned_(std::move(owned)),
        j_(*owned_),
        file_(std::move(file)),
        path_(std::move(path)),
        defaults_(std::move(defaults)) {}

  std::string Field(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  // "FILE: FIELD": where every message about a field begins (issue 45: the
  // head and GQA checks named the field without the file).
  std::string Where(const std::string& key) const { return file_ + ": " + Field(key); }

  int64_t Int(const std::string& key) const {
    // An explicit null is not the class default: transformers keeps None,
    // and a layer of None features fails there (intermediate_size: null
    // read as Qwen3's default made a 4B model 7.4B). Only the fields its
    // configs resolve from others (num_key_value_heads = heads, head_dim =
    // hidden / heads) take their default.
    if (j_.contains(key) && j_.at(key).is_null() && key != "num_key_value_heads" && key != "head_dim") {
      throw Error(fmt::format("{}: {}: null; expected an integer from 1 to {}", file_, Field(key), kMaxField));
    }
    if (!j_.contains(key) || j_.at(key).is_null()) {
      auto d = defaults_.find(key);
      if (d != defaults_.end()) return d->second;
      throw Error(fmt::format("{}: {}: missing; this config needs it", file_, Field(key)));
    }
    const json& v = j_.at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > kMaxField) {
      throw Error(fmt::format("{}: {}: expected an integer from 1 to {}, got {}", file_, Field(key), kMaxField,
                              v.dump().substr(0, 40)));
    }
    return v.get<int64_t>();
  }
  int64_t Int(const std::string& key, int64_t fallback) const {
    return j_.contains(key) && !j_.at(key).is_null() ? Int(key) : fallback;
  }
  bool Bool(const std::string& key, bool fallback) const {
    if (!j_.contains(key) || j_.at(key).is_null()) return fallback;
    if (!j_.at(key).is_boolean()) {
      throw Error(
          fmt::format("{}: {}: expected true or false, got {}", file_, Field(key), j_.at(key).dump().substr(0, 40)));
    }
    return j_.at(key).get<bool>();
  }
  std::string Type() const {
    if (!j_.contains("model_type") || !j_.at("model_type").is_string()) {
      throw Error(fmt::format("{}: {}: missing; a Hugging Face config names its architecture there", file_,
                              Field("model_type")));
    }
    return j_.at("model_type").get<std::string>();
  }
  Cfg Sub(const std::string& key, std::map<std::string, int64_t> defaults) const {
    static const json empty = json::object();
    if (Has(key) && !j_.at(key).is_object()) {  // null is absent, as transformers reads it
      throw Error(fmt::format("{}: {}: expected an object", file_, Field(key)));
    }
    return Cfg(Has(key) ? j_.at(key) : empty, file_, Field(key), std::move(defaults));
  }
  bool Has(const std::string& key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  const json& Json() const { return j_; }
  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }
  const json& Raw(const std::string& key) const { return j_.at(key); }
  double Real(const std::string& key, double fallback) const {
    if (!Has(key)) return fallback;
    const json& v = j_.at(key);
    if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>())) {
      throw Error(fmt::format("{}: {}: expected a positive number, got {}", file_, Field(key), v.dump().substr(0, 40)));
    }
    return v.get<double>();
  }
  std::string String(const std::string& key, const std::string& fallback) const {
    if (!Has(key)) return fallback;
    if (!j_.at(key).is_string()) {
      throw Error(fmt::format("{}: {}: expected a string, got {}", file_, Field(key), j_.at(key).dump().substr(0, 40)));
    }
    return j_.at(key).get<std::string>();
  }

 private:
  std::shared_ptr<const json> owned_;  // declared before j_, which may refer to it
  const json& j_;
  std::string file_, path_;
  std::map<std::string, int64_t> defaults_;
};

// Defaults of Transformers' config classes (their __init__ signatures), by model_type.
const std::map<std::string, std::map<std::string, int64_t>>& LlmDefaults();
const std::map<std::string, std::map<std::string, int64_t>>& VisionDefaults();

struct Emitter {
  std::string yaml;
  void Module(const std::string& name, const std::string& role, const std::string& modality, const std::string& inputs,
              const std::string& tokens, const std::vector<std::string>& layers, const std::string& prefix = "") {
    yaml += fmt::format("  - name: {}\n    role: {}\n    modality: {}\n", name, role, modality);
    if (!inputs.empty()) yaml += fmt::format("    inputs: [{}]\n", inputs);
    if (!prefix.empty()) yaml += fmt::format("    weights_prefix: '{}'\n", prefix);
    yaml += fmt::format("    tokens: {}\n    layers:\n", tokens);
    for (const auto& l : layers) yaml += "      - " + l + "\n";
  }
};

// A real number as YAML that reads back to the same double.
std::string Exact(double x);
// The rotary positions of an LLM config as transformer-layer YAML keys.
std::string RopeYaml(const Cfg& c);
// transformers' ACT2FN names as Loom's activations (spec/layer.h).
std::string ActivationYaml(const Cfg& c, const std::string& key, const std::string& fallback);

// The model_type of the LLM sub-config `key` of `top` (`fallback` when it
// names none: the composite config class's default), one EmitLlm reads;
// else loom::Error naming the field, the valid types and `hint`.
std::string LlmType(const Cfg& top, const std::string& key, const std::string& fallback, const std::string& hint = "");

// A Llama-style decoder as module `name` (see the definition).
void EmitLlm(Emitter& out, const Cfg& c, const std::string& type, const std::string& name, bool multimodal,
             const std::string& inputs, const std::string& prefix = "", std::optional<bool> tied = std::nullopt);
// A ViT / CLIP / SigLIP tower as module `name`; returns its width. `tokens`
// replaces the image token rule when given (tilings, fixed counts).
int64_t EmitVision(Emitter& out, const Cfg& c, const std::string& type, const std::string& name, int64_t layers,
                   int64_t drop, const std::string& prefix, const std::string& tokens = "");
void EmitTextEncoder(Emitter& out, const Cfg& c);
// LLaVA: tower, projector, LLM. `tiling`: extra image token-rule keys (AnyRes).
void EmitLlava(Emitter& out, const Cfg& top, const Cfg& vision, const std::string& vt, const Cfg& text,
               const std::string& tt, const std::string& tiling = "");

}  // namespace loom::hf
