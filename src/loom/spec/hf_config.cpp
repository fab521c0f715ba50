#include "loom/spec/hf_config.h"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "loom/did_you_mean.h"
#include "loom/error.h"

namespace loom {

namespace {

using nlohmann::json;

constexpr int64_t kMaxField = int64_t{1} << 24;  // every width, count and vocabulary, as spec/ bounds them

// One (sub-)config with the defaults of the Transformers config class it
// stands for; every read names `file` and the field's dotted path.
class Cfg {
 public:
  Cfg(const json& j, std::string file, std::string path, std::map<std::string, int64_t> defaults)
      : j_(j), file_(std::move(file)), path_(std::move(path)), defaults_(std::move(defaults)) {}

  std::string Field(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  // "FILE: FIELD": where every message about a field begins (issue 45: the
  // head and GQA checks named the field without the file).
  std::string Where(const std::string& key) const { return file_ + ": " + Field(key); }

  int64_t Int(const std::string& key) const {
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
  const json& j_;
  std::string file_, path_;
  std::map<std::string, int64_t> defaults_;
};

// Defaults of Transformers' config classes (their __init__ signatures).
const std::map<std::string, std::map<std::string, int64_t>>& LlmDefaults() {
  static const std::map<std::string, std::map<std::string, int64_t>> d = {
      {"llama",
       {{"vocab_size", 32000},
        {"hidden_size", 4096},
        {"intermediate_size", 11008},
        {"num_hidden_layers", 32},
        {"num_attention_heads", 32}}},
      {"mistral",
       {{"vocab_size", 32000},
        {"hidden_size", 4096},
        {"intermediate_size", 14336},
        {"num_hidden_layers", 32},
        {"num_attention_heads", 32},
        {"num_key_value_heads", 8}}},
      {"qwen2",
       {{"vocab_size", 151936},
        {"hidden_size", 4096},
        {"intermediate_size", 22016},
        {"num_hidden_layers", 32},
        {"num_attention_heads", 32},
        {"num_key_value_heads", 32}}},
      {"qwen3",
       {{"vocab_size", 151936},
        {"hidden_size", 4096},
        {"intermediate_size", 22016},
        {"num_hidden_layers", 32},
        {"num_attention_heads", 32},
        {"num_key_value_heads", 32},
        {"head_dim", 128}}},
  };
  return d;
}

const std::map<std::string, std::map<std::string, int64_t>>& VisionDefaults() {
  static const std::map<std::string, std::map<std::string, int64_t>> d = {
      {"vit",
       {{"hidden_size", 768},
        {"intermediate_size", 3072},
        {"num_hidden_layers", 12},
        {"num_attention_heads", 12},
        {"image_size", 224},
        {"patch_size", 16},
        {"num_channels", 3}}},
      {"clip_vision_model",
       {{"hidden_size", 768},
        {"intermediate_size", 3072},
        {"num_hidden_layers", 12},
        {"num_attention_heads", 12},
        {"image_size", 224},
        {"patch_size", 32},
        {"num_channels", 3}}},
      {"siglip_vision_model",
       {{"hidden_size", 768},
        {"intermediate_size", 3072},
        {"num_hidden_layers", 12},
        {"num_attention_heads", 12},
        {"image_size", 224},
        {"patch_size", 16},
        {"num_channels", 3}}},
  };
  return d;
}

std::string Known() {
  return "llama, mistral, qwen2, qwen3, vit, clip, clip_vision_model, siglip, siglip_vision_model, whisper, llava, "
         "llava_next, qwen2_vl";
}

// Architectures Loom does not read yet, each with the closest one it does and
// what to do meanwhile (issue 43): the closest shares the shape that drives
// planning (towers, projector, LLM), and the difference is named.
const std::map<std::string, std::pair<std::string, std::string>>& NearlyKnown() {
  static const std::map<std::string, std::pair<std::string, std::string>> types = {
      {"qwen2_5_vl",
       {"qwen2_vl",
        "the same patch merger and LLM; 2.5 adds window attention and a SwiGLU MLP to the vision tower, so "
        "model_type qwen2_vl prices its tower's attention a little high"}},
      {"internvl_chat",
       {"llava",
        "an InternViT tower, an MLP projector and an LLM: give it as llava with the InternViT sizes in "
        "vision_config (model_type vit) and the LLM's in text_config"}},
      {"internvl", {"llava", "as internvl_chat: llava with the InternViT sizes as a vit vision_config"}},
      {"idefics3",
       {"llava",
        "a SigLIP tower, a pixel-shuffle connector and a Llama: llava with a siglip_vision_model "
        "vision_config; the shuffle's 4x fewer image tokens are not modelled"}},
      {"llava_onevision", {"llava_next", "the same AnyRes tiling family with a SigLIP tower and a Qwen2 LLM"}},
      {"mllama",
       {"llava",
        "its cross-attention layers are not modelled: write a model YAML (docs/spec-format.md) with a "
        "cross-attention block per layer, as the zoo's dit models do"}},
      {"gemma3", {"llava", "a SigLIP tower and a Gemma 3 LLM, which Loom does not model: write a model YAML"}},
      {"siglip2", {"siglip", "SigLIP 2 keeps SigLIP's tower shape: use model_type siglip_vision_model"}},
      {"pixtral", {"llava", "a Pixtral tower (2D RoPE) and a Mistral LLM: llava with a vit vision_config"}},
      {"phi3_v", {"llava", "a CLIP tower and a Phi-3 LLM (as llama): llava with text_config model_type llama"}},
  };
  return types;
}

std::vector<std::string> KnownNames() {
  std::vector<std::string> names;
  const std::string all = Known();
  for (size_t at = 0; at < all.size();) {
    const size_t comma = all.find(", ", at);
    names.push_back(all.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    at = comma == std::string::npos ? all.size() : comma + 2;
  }
  return names;
}

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
std::string Exact(double x) { return fmt::format("{:.17g}", x); }

// The rotary positions of an LLM config as transformer-layer YAML keys.
// transformers 5 writes `rope_parameters` {rope_type, rope_theta, ...}; older
// configs `rope_theta` and `rope_scaling` {rope_type or type, ...}. Both are
// read; "default" and "llama3" are what Loom's runtime computes.
std::string RopeYaml(const Cfg& c) {
  const bool v5 = c.Has("rope_parameters");
  const Cfg r = v5 ? c.Sub("rope_parameters", {}) : c.Sub("rope_scaling", {});
  const double theta = v5 ? r.Real("rope_theta", c.Real("rope_theta", 10000.0)) : c.Real("rope_theta", 10000.0);
  const std::string type = r.String("rope_type", r.String("type", "default"));
  std::string yaml = ", rope_theta: " + Exact(theta);
  if (c.Has("max_position_embeddings"))
    yaml += fmt::format(", rope_max_positions: {}", c.Int("max_position_embeddings"));
  if (type == "default") return yaml;
  if (type != "llama3") {
    throw Error(fmt::format("{}: rope type '{}' is not one Loom's runtime computes; valid: default, llama3",
                            r.Where("rope_type"), type));
  }
  // transformers' standardize_rope_params: original_max_position_embeddings defaults to max_position_embeddings.
  const int64_t max_positions = c.Int("max_position_embeddings", 2048);
  const Cfg d = v5 ? c.Sub("rope_parameters", {{"original_max_position_embeddings", max_positions}})
                   : c.Sub("rope_scaling", {{"original_max_position_embeddings", max_positions}});
  return yaml + fmt::format(
                    ", rope_scaling: {{type: llama3, factor: {}, low_freq_factor: {}, high_freq_factor: {}, "
                    "original_max_position_embeddings: {}}}",
                    Exact(d.Real("factor", 8.0)), Exact(d.Real("low_freq_factor", 1.0)),
                    Exact(d.Real("high_freq_factor", 4.0)), d.Int("original_max_position_embeddings"));
}

// transformers' ACT2FN names as Loom's activations (spec/layer.h).
std::string ActivationYaml(const Cfg& c, const std::string& key, const std::string& fallback) {
  const std::string act = c.String(key, fallback);
  if (act == "silu" || act == "swish") return "silu";
  if (act == "gelu") return "gelu";
  // gelu_new is the same tanh formula written out in Python: equal up to rounding, not bit for bit.
  if (act == "gelu_pytorch_tanh" || act == "gelu_new") return "gelu_tanh";
  if (act == "quick_gelu") return "quick_gelu";
  throw Error(
      fmt::format("{}: activation '{}' is not one Loom's runtime computes; valid: silu, gelu, "
                  "gelu_pytorch_tanh, gelu_new, quick_gelu",
                  c.Where(key), act));
}

// A Llama-style decoder (transformers' LlamaModel, MistralModel, Qwen2Model,
// Qwen3Model): embedding, N pre-RMSNorm blocks of GQA attention with rotary
// positions and a SwiGLU MLP, the final RMSNorm, the head. Per family:
// `attention_bias` puts biases on q, k, v and o (Llama, Mistral, Qwen3);
// Qwen2 always has them on q, k and v and never on o; Qwen3 normalises each
// head of q and k and sets head_dim itself. Mistral's and Qwen's sliding
// windows are not computed: the runtime refuses a sample longer than one.
// `tied`: whether the head shares the embedding (default: the config's
// tie_word_embeddings; LLaVA's own config decides for its LLM).
void EmitLlm(Emitter& out, const Cfg& c, const std::string& type, const std::string& name, bool multimodal,
             const std::string& inputs, const std::string& prefix = "", std::optional<bool> tied = std::nullopt) {
  const auto it = LlmDefaults().find(type);
  if (it == LlmDefaults().end()) {
    throw Error(fmt::format("{}: unknown language model '{}'; valid: llama, mistral, qwen2, qwen3",
                            c.Where("model_type"), type));
  }
  const int64_t hidden = c.Int("hidden_size"), heads = c.Int("num_attention_heads");
  const int64_t kv = c.Int("num_key_value_heads", heads), vocab = c.Int("vocab_size");
  const double eps = c.Real("rms_norm_eps", 1e-6);
  const bool attention_bias = c.Bool("attention_bias", false);
  const bool qkv_bias = type == "qwen2" || attention_bias, out_bias = type != "qwen2" && attention_bias;
  if (!c.Has("head_dim") && type != "qwen3" && hidden % heads != 0) {
    throw Error(fmt::format("{}: {} does not divide hidden_size {}; give head_dim", c.Where("num_attention_heads"),
                            heads, hidden));
  }
  if (heads % kv != 0) {
    throw Error(fmt::format("{}: {} must divide num_attention_heads ({})", c.Where("num_key_value_heads"), kv, heads));
  }
  out.Module(name, "backbone", multimodal ? "multimodal" : "text", inputs,
             multimodal ? "{source: text+inputs}" : "{source: text}",
             {fmt::format("{{kind: embedding, vocab: {}, hidden: {}}}", vocab, hidden),
              fmt::format("{{kind: transformer, count: {}, hidden: {}, ffn_hidden: {}, heads: {}, kv_heads: {}{}, "
                          "gated_mlp: true, causal: true, norm: rms, norm_eps: {}, activation: {}, qkv_bias: {}, "
                          "out_bias: {}, mlp_bias: {}, qk_norm: {}{}}}",
                          c.Int("num_hidden_layers"), hidden, c.Int("intermediate_size"), heads, kv,
                          c.Has("head_dim") || type == "qwen3" ? fmt::format(", head_dim: {}", c.Int("head_dim")) : "",
                          Exact(eps), ActivationYaml(c, "hidden_act", "silu"), qkv_bias, out_bias,
                          c.Bool("mlp_bias", false), type == "qwen3", RopeYaml(c)),
              fmt::format("{{kind: lm_head, vocab: {}, hidden: {}, tied: {}, final_norm: rms, norm_eps: {}}}", vocab,
                          hidden, tied.value_or(c.Bool("tie_word_embeddings", false)), Exact(eps))},
             prefix);
}

// A vision tower: the patch embedding (CLIP: a class token first, a bias-free
// conv, then pre_layrnorm; SigLIP: a conv with a bias, no class token), then
// `layers` encoder layers (-1: all; LLaVA stops at its vision_feature_layer:
// transformers computes the later ones but reads nothing from them), pre-
// LayerNorm blocks with biases everywhere (CLIPEncoderLayer,
// SiglipEncoderLayer). The first `drop` tokens of each image are not handed
// downstream (LLaVA's "default" feature strategy).
// The post-norm acts only on the pooled output (CLIP) or before SigLIP's
// pooling head, neither of which LLaVA reads. Returns the tower's width.
int64_t EmitVision(Emitter& out, const Cfg& c, const std::string& type, const std::string& name, int64_t layers,
                   int64_t drop, const std::string& prefix) {
  const int64_t hidden = c.Int("hidden_size"), patch = c.Int("patch_size"), image = c.Int("image_size");
  const int64_t grid = (image / patch) * (image / patch);  // the stride-`patch` conv drops a remainder (384 / 14)
  const bool clip = type == "clip_vision_model", siglip = type == "siglip_vision_model";
  const int cls = siglip ? 0 : 1;  // SigLIP has no class token
  std::string tokens = fmt::format("{{source: image, patch_px: {}, resize_px: {}, extra_tokens: {}{}}}", patch, image,
                                   cls, drop > 0 ? fmt::format(", drop_tokens: {}", drop) : "");
  // transformers' defaults: CLIP quick_gelu and eps 1e-5, SigLIP gelu_pytorch_tanh and 1e-6, ViT gelu and 1e-12.
  const std::string act = ActivationYaml(c, "hidden_act", clip ? "quick_gelu" : siglip ? "gelu_pytorch_tanh" : "gelu");
  const double eps = c.Real("layer_norm_eps", clip ? 1e-5 : siglip ? 1e-6 : 1e-12);
  const int64_t count = layers < 0 ? c.Int("num_hidden_layers") : layers;
  std::vector<std::string> yaml = {
      fmt::format("{{kind: patch_embed, patch_px: {}, hidden: {}, in_channels: {}, positions: {}, bias: {}{}}}", patch,
                  hidden, c.Int("num_channels", 3), grid + cls, !clip,
                  clip ? fmt::format(", out_norm: layer, norm_eps: {}", Exact(eps)) : "")};
  if (count > 0) {
    yaml.push_back(
        fmt::format("{{kind: transformer, count: {}, hidden: {}, ffn_hidden: {}, heads: {}, norm: layer, norm_eps: {}, "
                    "activation: {}, qkv_bias: true, out_bias: true, mlp_bias: true}}",
                    count, hidden, c.Int("intermediate_size"), c.Int("num_attention_heads"), Exact(eps), act));
  }
  // SigLIP's attention-pooling head, standing alone: one more attention + MLP
  // block (as the zoo's siglip; its weights have no names in Loom).
  if (siglip && layers < 0 && c.Bool("vision_use_head", true)) {
    yaml.push_back(fmt::format("{{kind: transformer, hidden: {}, ffn_hidden: {}, heads: {}}}", hidden,
                               c.Int("intermediate_size"), c.Int("num_attention_heads")));
  }
  out.Module(name, "encoder", "image", "", tokens, yaml, prefix);
  return hidden;
}

void EmitTextEncoder(Emitter& out, const Cfg& c) {
  const int64_t hidden = c.Int("hidden_size");
  out.Module(
      "text", "encoder", "text", "", fmt::format("{{source: text, max_tokens: {}}}", c.Int("max_position_embeddings")),
      {fmt::format("{{kind: embedding, vocab: {}, hidden: {}, positions: {}}}", c.Int("vocab_size"), hidden,
                   c.Int("max_position_embeddings")),
       fmt::format("{{kind: transformer, count: {}, hidden: {}, ffn_hidden: {}, heads: {}, causal: true}}",
                   c.Int("num_hidden_layers"), hidden, c.Int("intermediate_size"), c.Int("num_attention_heads"))});
}

// LLaVA (LlavaModel): the vision tower's hidden states after
// `vision_feature_layer` (transformers' hidden_states[k]: 0 is the embeddings
// after pre_layrnorm, k the output of encoder layer k; negative counts from
// the end, so -2, the default, stops one layer short of the last), the class
// token dropped under the "default" strategy ("full" keeps it), the projector
// (linear_1, projector_hidden_act, linear_2, biases per
// multimodal_projector_bias), the LLM. Weights sit under transformers'
// names as transformers 5 saves them: vision_tower.*, multi_modal_projector.*,
// language_model.* (runtime/hf_weights.cpp also reads the other layouts).
void EmitLlava(Emitter& out, const Cfg& top, const Cfg& vision, const std::string& vt, const Cfg& text,
               const std::string& tt) {
  const int64_t all = vision.Int("num_hidden_layers");
  int64_t layers = all - 1;
  if (top.Has("vision_feature_layer")) {
    const nlohmann::json& v = top.Raw("vision_feature_layer");
    if (!v.is_number_integer() || v.get<int64_t>() < -all - 1 || v.get<int64_t>() > all) {
      throw Error(fmt::format("{}: expected one layer index from {} to {} (a list of layers is not read yet), got {}",
                              top.Where("vision_feature_layer"), -all - 1, all, v.dump().substr(0, 40)));
    }
    layers = v.get<int64_t>() < 0 ? all + 1 + v.get<int64_t>() : v.get<int64_t>();
  }
  const std::string strategy = top.String("vision_feature_select_strategy", "default");
  if (strategy != "default" && strategy != "full") {
    throw Error(fmt::format("{}: '{}'; valid: default (drops the first token), full",
                            top.Where("vision_feature_select_strategy"), strategy));
  }
  const int64_t vh = EmitVision(out, vision, vt, "vision", layers, strategy == "default" ? 1 : 0, "vision_tower.");
  const int64_t th = text.Int("hidden_size");
  out.Module(
      "projector", "projector", "image", "vision", "{source: inputs}",
      {fmt::format("{{kind: mlp_projector, in_dim: {}, hidden: {}, out_dim: {}, bias: {}, activation: {}}}", vh, th, th,
                   top.Bool("multimodal_projector_bias", true), ActivationYaml(top, "projector_hidden_act", "gelu"))},
      "multi_modal_projector.");
  // LlavaForConditionalGeneration ties its head by its own config's
  // tie_word_embeddings (transformers copies text_config's there when the
  // top level gives none).
  EmitLlm(out, text, tt, "llm", true, "projector", "language_model.",
          top.Bool("tie_word_embeddings", text.Bool("tie_word_embeddings", false)));
}

}  // namespace

bool LooksLikeHfConfig(const std::string& text) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos || text[first] != '{') return false;
  try {
    const json j = json::parse(text);
    return j.is_object() && (j.contains("model_type") || j.contains("architectures"));
  } catch (const json::exception&) {
    return false;
  }
}

std::string HfConfigToModelYaml(const std::string& json_text, const std::string& file, const std::string& name) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}: malformed JSON: {}", file, e.what()));
  }
  if (!j.is_object()) throw Error(fmt::format("{}: a Hugging Face config is a JSON object", file));
  const Cfg top(j, file, "", {});
  const std::string type = top.Type();
  Emitter out;
  std::string description = fmt::format("from the Hugging Face config {} (model_type {})", file, type);
  if (LlmDefaults().count(type)) {
    EmitLlm(out, Cfg(j, file, "", LlmDefaults().at(type)), type, "llm", false, "");
  } else if (VisionDefaults().count(type)) {
    EmitVision(out, Cfg(j, file, "", VisionDefaults().at(type)), type, "vision", -1, 0, "");
  } else if (type == "clip" || type == "siglip") {
    const std::string vt = type + "_vision_model";
    EmitVision(out, top.Sub("vision_config", VisionDefaults().at(vt)), vt, "vision", -1, 0, "");
    const std::map<std::string, int64_t> text_defaults =
        type == "clip" ? std::map<std::string, int64_t>{{"vocab_size", 49408},       {"hidden_size", 512},
                                                        {"intermediate_size", 2048}, {"num_hidden_layers", 12},
                                                        {"num_attention_heads", 8},  {"max_position_embeddings", 77}}
                       : std::map<std::string, int64_t>{{"vocab_size", 32000},       {"hidden_size", 768},
                                                        {"intermediate_size", 3072}, {"num_hidden_layers", 12},
                                                        {"num_attention_heads", 12}, {"max_position_embeddings", 64}};
    EmitTextEncoder(out, top.Sub("text_config", text_defaults));
  } else if (type == "whisper") {
    // The audio encoder: two 1-D convolutions (the second halves the frames
    // to 50 a second) and the encoder layers, as the zoo's whisper-encoder.
    const Cfg w(j, file, "",
                {{"num_mel_bins", 80},
                 {"d_model", 384},
                 {"encoder_layers", 4},
                 {"encoder_attention_heads", 6},
                 {"encoder_ffn_dim", 1536},
                 {"max_source_positions", 1500}});
    const int64_t d = w.Int("d_model");
    out.Module("audio", "encoder", "audio", "", "{source: audio, tokens_per_s: 50}",
               {fmt::format("{{kind: conv, in_channels: {}, out_channels: {}, kernel: 3, dims: 1, stride: 2}}",
                            w.Int("num_mel_bins"), d),
                fmt::format("{{kind: conv, in_channels: {}, out_channels: {}, kernel: 3, dims: 1, positions: {}}}", d,
                            d, w.Int("max_source_positions")),
                fmt::format("{{kind: transformer, count: {}, hidden: {}, ffn_hidden: {}, heads: {}}}",
                            w.Int("encoder_layers"), d, w.Int("encoder_ffn_dim"), w.Int("encoder_attention_heads"))});
    description += "; its audio encoder (the text decoder is not modelled)";
  } else if (type == "llava" || type == "llava_next") {
    const Cfg vc = top.Sub("vision_config", {});
    const std::string vt = vc.Has("model_type") ? vc.Type() : "clip_vision_model";
    if (!VisionDefaults().count(vt)) {
      throw Error(fmt::format("{}: unknown vision tower '{}'; valid: vit, clip_vision_model, siglip_vision_model",
                              vc.Where("model_type"), vt));
    }
    const Cfg vision = top.Sub("vision_config", VisionDefaults().at(vt));
    const Cfg tc = top.Sub("text_config", {});
    const std::string tt = tc.Has("model_type") ? tc.Type() : "llama";
    if (!LlmDefaults().count(tt)) {
      throw Error(fmt::format("{}: unknown language model '{}'; valid: llama, mistral, qwen2, qwen3",
                              tc.Where("model_type"), tt));
    }
    const Cfg text = top.Sub("text_config", LlmDefaults().at(tt));
    EmitLlava(out, top, vision, vt, text, tt);
  } else if (type == "qwen2_vl") {
    const Cfg v = top.Sub("vision_config", {{"depth", 32},
                                            {"embed_dim", 1280},
                                            {"hidden_size", 3584},
                                            {"mlp_ratio", 4},
                                            {"num_heads", 16},
                                            {"in_chans", 3},
                                            {"patch_size", 14},
                                            {"spatial_merge_size", 2},
                                            {"temporal_patch_size", 2}});
    const int64_t e = v.Int("embed_dim"), merge = v.Int("spatial_merge_size"), patch = v.Int("patch_size");
    out.Module("vision", "encoder", "image", "",
               fmt::format("{{source: image, patch_px: {}, merge: {}}}", patch, merge),
               {fmt::format("{{kind: patch_embed, patch_px: {}, hidden: {}, in_channels: {}, temporal_patch: {}}}",
                            patch, e, v.Int("in_chans"), v.Int("temporal_patch_size")),
                fmt::format("{{kind: transformer, count: {}, hidden: {}, ffn_hidden: {}, heads: {}}}", v.Int("depth"),
                            e, e * v.Int("mlp_ratio"), v.Int("num_heads"))});
    // The patch merger: merge x merge neighbours concatenated, a 2-layer MLP into the LLM's width.
    const Cfg text(j, file, "",
                   {{"vocab_size", 152064},
                    {"hidden_size", 8192},
                    {"intermediate_size", 29568},
                    {"num_hidden_layers", 80},
                    {"num_attention_heads", 64},
                    {"num_key_value_heads", 8}});
    out.Module("merger", "projector", "image", "vision", "{source: inputs}",
               {fmt::format("{{kind: mlp_projector, in_dim: {}, hidden: {}, out_dim: {}}}", e * merge * merge,
                            e * merge * merge, text.Int("hidden_size"))});
    if (v.Int("hidden_size") != text.Int("hidden_size")) {
      throw Error(fmt::format("{} ({}) must equal hidden_size ({}): the merger feeds the LLM", v.Where("hidden_size"),
                              v.Int("hidden_size"), text.Int("hidden_size")));
    }
    EmitLlm(out, text, "qwen2", "llm", true, "merger");
  } else {
    if (const auto near = NearlyKnown().find(type); near != NearlyKnown().end()) {
      throw Error(
          fmt::format("{}: model_type: '{}' is not an architecture Loom reads yet; the closest it reads is {}: {}",
                      file, type, near->second.first, near->second.second));
    }
    throw Error(fmt::format("{}: model_type: '{}' is not an architecture Loom reads; valid: {}{}", file, type, Known(),
                            DidYouMean(type, KnownNames())));
  }
  // YAML single quotes: a quote inside is written twice.
  auto quoted = [](std::string v) {
    for (size_t i = 0; (i = v.find('\'', i)) != std::string::npos; i += 2) v.insert(i, "'");
    return "'" + v + "'";
  };
  return fmt::format("model: {}\ndescription: {}\nmodules:\n{}", quoted(name), quoted(description), out.yaml);
}

}  // namespace loom
