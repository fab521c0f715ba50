#include "loom/spec/hf/hf_reader.h"

namespace loom::hf {

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

std::string Exact(double x) { return fmt::format("{:.17g}", x); }

// llama3's scaling needs its factors (transformers' _validate_llama3_parameters
// requires them): none is defaulted.
double RopeField(const Cfg& d, const std::string& key) {
  if (!d.Has(key)) throw Error(fmt::format("{}: missing; llama3 rope scaling needs it", d.Where(key)));
  return d.Real(key, 0);
}

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
  // Read in order, so that the first missing one is named.
  const double factor = RopeField(d, "factor"), low = RopeField(d, "low_freq_factor"),
               high = RopeField(d, "high_freq_factor");
  return yaml + fmt::format(
                    ", rope_scaling: {{type: llama3, factor: {}, low_freq_factor: {}, high_freq_factor: {}, "
                    "original_max_position_embeddings: {}}}",
                    Exact(factor), Exact(low), Exact(high), d.Int("original_max_position_embeddings"));
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
std::string LlmType(const Cfg& top, const std::string& key, const std::string& fallback, const std::string& hint) {
  const Cfg tc = top.Sub(key, {});
  const std::string type = tc.Has("model_type") ? tc.Type() : fallback;
  if (!LlmDefaults().count(type)) {
    throw Error(fmt::format("{}: unknown language model '{}'; valid: llama, mistral, qwen2, qwen3{}",
                            tc.Where("model_type"), type, hint));
  }
  return type;
}

void EmitLlm(Emitter& out, const Cfg& c, const std::string& type, const std::string& name, bool multimodal,
             const std::string& inputs, const std::string& prefix, std::optional<bool> tied) {
  const auto it = LlmDefaults().find(type);
  if (it == LlmDefaults().end()) {
    throw Error(fmt::format("{}: unknown language model '{}'; valid: llama, mistral, qwen2, qwen3",
                            c.Where("model_type"), type));
  }
  const int64_t hidden = c.Int("hidden_size"), heads = c.Int("num_attention_heads");
  // An absent num_key_value_heads takes the class default where the class
  // has one (MistralConfig 8, Qwen2Config and Qwen3Config 32); LlamaConfig's
  // is None, and None resolves to num_attention_heads in every class.
  const auto class_kv = it->second.find("num_key_value_heads");
  const bool absent_kv = !c.Json().contains("num_key_value_heads");
  const int64_t kv = absent_kv && class_kv != it->second.end() ? class_kv->second : c.Int("num_key_value_heads", heads);
  const int64_t vocab = c.Int("vocab_size");
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
                   int64_t drop, const std::string& prefix, const std::string& tokens_yaml) {
  const int64_t hidden = c.Int("hidden_size"), patch = c.Int("patch_size"), image = c.Int("image_size");
  if (image < patch) {  // transformers' conv makes no patch of it
    throw Error(fmt::format("{}: {} px holds no {}-px patch ({}); valid: at least {}", c.Where("image_size"), image,
                            patch, c.Field("patch_size"), patch));
  }
  const int64_t grid = (image / patch) * (image / patch);  // the stride-`patch` conv drops a remainder (384 / 14)
  const bool clip = type == "clip_vision_model", siglip = type == "siglip_vision_model";
  const int cls = siglip ? 0 : 1;  // SigLIP has no class token
  const std::string tokens =
      !tokens_yaml.empty() ? tokens_yaml
                           : fmt::format("{{source: image, patch_px: {}, resize_px: {}, extra_tokens: {}{}}}", patch,
                                         image, cls, drop > 0 ? fmt::format(", drop_tokens: {}", drop) : "");
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
               const std::string& tt, const std::string& tiling) {
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
  const int64_t drop = strategy == "default" ? 1 : 0;
  // AnyRes: the tiles' tokens per image come from the tiling (the class token dropped there too).
  const int64_t patch = vision.Int("patch_size"), cls = vt == "siglip_vision_model" ? 0 : 1;
  const std::string tokens =
      tiling.empty()
          ? ""
          : fmt::format("{{source: image, patch_px: {}, extra_tokens: {}, tiling: {{{}}}}}", patch, cls, tiling);
  const int64_t vh = EmitVision(out, vision, vt, "vision", layers, drop, "vision_tower.", tokens);
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

}  // namespace loom::hf
