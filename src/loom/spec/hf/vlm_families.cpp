#include "loom/spec/hf/vlm_families.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <memory>
#include <set>

namespace loom::hf {

namespace {

// A config with `key` given a value when the file has none: the family's
// default (transformers' config class) where it differs from what the shared
// emitters assume.
Cfg WithDefault(const Cfg& c, const std::string& key, const json& value, std::map<std::string, int64_t> defaults = {}) {
  auto copy = std::make_shared<json>(c.Json());
  if (!c.Has(key)) (*copy)[key] = value;
  return Cfg(std::move(copy), c.file(), c.path(), std::move(defaults));
}

// A sub-config for an LLM read for planning only: its rotary scaling
// (dynamic NTK, M-RoPE, ...) changes no shape or work, so it is dropped
// rather than refused as the runtime's families refuse it. `key` "": `top` itself.
Cfg PlanningLlm(const Cfg& top, const std::string& key, std::map<std::string, int64_t> defaults) {
  auto copy = std::make_shared<json>(key.empty() ? top.Json() : top.Has(key) ? top.Json().at(key) : json::object());
  if (!copy->is_object()) throw Error(fmt::format("{}: expected an object", top.Where(key)));
  copy->erase("rope_scaling");
  copy->erase("rope_parameters");
  return Cfg(std::move(copy), top.file(), key.empty() ? top.path() : top.Field(key), std::move(defaults));
}

// A width or size that transformers also takes as an [h, w] pair (InternVL's image_size, patch_size).
int64_t SquareSize(const Cfg& c, const std::string& key, int64_t fallback) {
  if (c.Has(key) && c.Json().at(key).is_array()) {
    const json& v = c.Json().at(key);
    if (v.size() != 2 || !v[0].is_number_integer() || v[0] != v[1] || v[0].get<int64_t>() < 1) {
      throw Error(
          fmt::format("{}: expected one size or a square [n, n] pair, got {}", c.Where(key), v.dump().substr(0, 40)));
    }
    return v[0].get<int64_t>();
  }
  return c.Int(key, fallback);
}

// An LLM whose layers differ from Llama's beyond EmitLlm's switches, written
// out: the embedding, `blocks` (transformer YAML bodies in order), the head.
void EmitLlmBlocks(Emitter& out, const std::string& name, const std::string& inputs, const std::string& tokens,
                   int64_t vocab_rows, int64_t vocab, int64_t hidden, bool tied,
                   const std::vector<std::string>& blocks) {
  std::vector<std::string> layers = {fmt::format("{{kind: embedding, vocab: {}, hidden: {}}}", vocab_rows, hidden)};
  for (const auto& b : blocks) layers.push_back("{kind: transformer, " + b + "}");
  // A head tied to a larger embedding (Mllama's 8 extra rows) keeps its own matrix in Loom's count.
  layers.push_back(fmt::format("{{kind: lm_head, vocab: {}, hidden: {}, tied: {}, final_norm: rms}}", vocab, hidden,
                               tied && vocab_rows == vocab));
  out.Module(name, "backbone", "multimodal", inputs, tokens, layers);
}

// Qwen2.5-VL (Qwen2_5_VLModel): its ViT (a bias-free Conv3d over 2 frames,
// RMSNorm blocks with a gated SiLU MLP and biases everywhere, 2-D rotary
// positions; window attention of 112 px in all blocks but
// fullatt_block_indexes, priced as full attention), the patch merger (ln_q,
// then a 2-layer MLP over each 2x2 group) and a Qwen2 LLM whose fields sit at
// the top level (transformers 4) or in text_config (5).
std::string EmitQwen25Vl(Emitter& out, const Cfg& top) {
  const Cfg v = top.Sub("vision_config", {{"depth", 32},
                                          {"hidden_size", 3584},  // Qwen2_5_VLVisionConfig's default; the 7B says 1280
                                          {"intermediate_size", 3420},
                                          {"num_heads", 16},
                                          {"in_chans", 3},
                                          {"patch_size", 14},
                                          {"spatial_merge_size", 2},
                                          {"temporal_patch_size", 2},
                                          {"out_hidden_size", 3584}});
  const int64_t e = v.Int("hidden_size"), merge = v.Int("spatial_merge_size"), patch = v.Int("patch_size");
  out.Module("vision", "encoder", "image", "", fmt::format("{{source: image, patch_px: {}, merge: {}}}", patch, merge),
             {fmt::format("{{kind: patch_embed, patch_px: {}, hidden: {}, in_channels: {}, temporal_patch: {}, "
                          "bias: false}}",
                          patch, e, v.Int("in_channels", v.Int("in_chans")), v.Int("temporal_patch_size")),
              fmt::format("{{kind: transformer, count: {}, hidden: {}, ffn_hidden: {}, heads: {}, gated_mlp: true, "
                          "norm: rms, norm_eps: 1e-06, activation: {}, qkv_bias: true, out_bias: true, "
                          "mlp_bias: true}}",
                          v.Int("depth"), e, v.Int("intermediate_size"), v.Int("num_heads"),
                          ActivationYaml(v, "hidden_act", "silu"))});
  const std::map<std::string, int64_t> text_defaults = {{"vocab_size", 152064},
                                                        {"hidden_size", 8192},
                                                        {"intermediate_size", 29568},
                                                        {"num_hidden_layers", 80},
                                                        {"num_attention_heads", 64},
                                                        {"num_key_value_heads", 8},
                                                        {"max_position_embeddings", 32768}};
  // M-RoPE splits the rotary frequencies over time, height and width: priced
  // as plain rotary positions (the same work), never computed by the runtime.
  const Cfg text = PlanningLlm(top, top.Has("text_config") ? "text_config" : "", text_defaults);
  out.Module("merger", "projector", "image", "vision", "{source: inputs}",
             {fmt::format("{{kind: mlp_projector, in_dim: {}, hidden: {}, out_dim: {}}}", e * merge * merge,
                          e * merge * merge, v.Int("out_hidden_size"))});
  if (v.Int("out_hidden_size") != text.Int("hidden_size")) {
    throw Error(fmt::format("{} ({}) must equal the LLM's hidden_size ({}): the merger feeds the LLM",
                            v.Where("out_hidden_size"), v.Int("out_hidden_size"), text.Int("hidden_size")));
  }
  EmitLlm(out, text, "qwen2", "llm", true, "merger", "",
          top.Bool("tie_word_embeddings", text.Bool("tie_word_embeddings", false)));
  return "Qwen2.5-VL's window attention and M-RoPE are priced, not computed";
}

// Gemma 3 (Gemma3ForConditionalGeneration): a SigLIP tower at 896 px without
// its pooling head (4096 patches), the projector (4x4 average pooling to
// mm_tokens_per_image, an RMSNorm, one bias-free matrix into the LLM), and
// Gemma 3's LLM (GQA with head_dim 256 and q/k norms, a gated
// gelu_pytorch_tanh MLP, sandwich norms, tied head; 5 sliding-window layers
// of 1024 tokens to 1 global, priced as full attention).
void EmitGemma3Text(Emitter& out, const Cfg& t, const std::string& inputs, bool tied) {
  const int64_t hidden = t.Int("hidden_size");
  const std::string block = fmt::format(
      "count: {}, hidden: {}, ffn_hidden: {}, heads: {}, kv_heads: {}, head_dim: {}, gated_mlp: true, causal: true, "
      "norm: rms, norm_eps: {}, activation: {}, qk_norm: true",
      t.Int("num_hidden_layers"), hidden, t.Int("intermediate_size"), t.Int("num_attention_heads"),
      t.Int("num_key_value_heads"), t.Int("head_dim"), Exact(t.Real("rms_norm_eps", 1e-6)),
      ActivationYaml(t, "hidden_activation", "gelu_pytorch_tanh"));
  std::vector<std::string> layers = {
      fmt::format("{{kind: embedding, vocab: {}, hidden: {}}}", t.Int("vocab_size"), hidden),
      "{kind: transformer, " + block + "}",
      fmt::format("{{kind: lm_head, vocab: {}, hidden: {}, tied: {}, final_norm: rms}}", t.Int("vocab_size"), hidden,
                  tied)};
  out.Module("llm", "backbone", inputs.empty() ? "text" : "multimodal", inputs,
             inputs.empty() ? "{source: text}" : "{source: text+inputs}", layers);
}

const std::map<std::string, int64_t>& Gemma3TextDefaults() {
  static const std::map<std::string, int64_t> d = {
      {"vocab_size", 262208},    {"hidden_size", 2304},      {"intermediate_size", 9216},
      {"num_hidden_layers", 26}, {"num_attention_heads", 8}, {"num_key_value_heads", 4},
      {"head_dim", 256}};
  return d;
}

std::string EmitGemma3(Emitter& out, const Cfg& top) {
  // Gemma3Config builds SiglipVisionConfig's defaults (B/16 at 224 px), not
  // the so400m tower its checkpoints name; with mm_tokens_per_image 256 those
  // fail below as they fail in transformers (an average pool of kernel 0).
  const Cfg v = top.Sub("vision_config", VisionDefaults().at("siglip_vision_model"));
  const int64_t side = v.Int("image_size") / v.Int("patch_size"), mm = top.Int("mm_tokens_per_image", 256);
  const int64_t pooled = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(mm))));
  if (pooled * pooled != mm || side % pooled != 0) {
    throw Error(fmt::format("{}: {} must be a square whose side divides the {} patches a side",
                            top.Where("mm_tokens_per_image"), mm, side));
  }
  const std::string tokens =
      fmt::format("{{source: image, tokens_per_image: {}, out_tokens_per_image: {}}}", side * side, mm);
  const int64_t vh = EmitVision(out, v, "siglip_vision_model", "vision", v.Int("num_hidden_layers"), 0, "", tokens);
  const Cfg t = top.Sub("text_config", Gemma3TextDefaults());
  out.Module("projector", "projector", "image", "vision", "{source: inputs}",
             {fmt::format("{{kind: mlp_projector, linear: true, in_dim: {}, out_dim: {}, bias: false}}", vh,
                          t.Int("hidden_size"))});
  EmitGemma3Text(out, t, "projector", top.Bool("tie_word_embeddings", true));
  return "Gemma 3's (1 + w) sandwich norms, scaled embeddings and sliding windows are priced, not computed";
}

// SigLIP 2 NaFlex (Siglip2Model): the SigLIP tower over a linear patch
// embedding of 16x16 patches and a 16x16 position table resized per image;
// the processor pads every image to max_num_patches (256) and the encoder
// computes them all. Fixed-resolution SigLIP 2 checkpoints are model_type siglip.
void EmitSiglip2Vision(Emitter& out, const Cfg& c) {
  const int64_t patches = c.Int("num_patches", 256), patch = c.Int("patch_size", 16);
  const int64_t side = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(patches))));
  const Cfg v = WithDefault(c, "image_size", side * patch,
                            {{"hidden_size", 768},
                             {"intermediate_size", 3072},
                             {"num_hidden_layers", 12},
                             {"num_attention_heads", 12},
                             {"patch_size", 16},
                             {"num_channels", 3}});
  EmitVision(out, v, "siglip_vision_model", "vision", -1, 0, "",
             fmt::format("{{source: image, tokens_per_image: {}}}", patches));
}

std::string EmitSiglip2(Emitter& out, const Cfg& top, bool tower_only) {
  if (tower_only) {
    EmitSiglip2Vision(out, top);
  } else {
    EmitSiglip2Vision(out, top.Sub("vision_config", {}));
    // Siglip2TextConfig's defaults (vocab 32000; the checkpoints give 256000).
    EmitTextEncoder(out, top.Sub("text_config", {{"vocab_size", 32000},
                                                 {"hidden_size", 768},
                                                 {"intermediate_size", 3072},
                                                 {"num_hidden_layers", 12},
                                                 {"num_attention_heads", 12},
                                                 {"max_position_embeddings", 64}}));
  }
  return "SigLIP 2's linear patch embedding over resized position tables is priced, not computed";
}

// InternVL (transformers' InternVLModel, and the remote-code internvl_chat
// layout it converts from): InternViT (a class token, learned positions,
// pre-norm blocks with layer scale, q/k/v biases per attention_bias, an
// always-biased output, optional full-width q/k norms), 448 px tiles chosen
// by the dynamic tiling, the pixel shuffle (downsample_ratio 0.5: 4 patches
// into one 4x wider token), LayerNorm + a 2-layer MLP, the LLM.
std::string EmitInternVl(Emitter& out, const Cfg& top, bool remote) {
  const std::string vkey = "vision_config", tkey = remote ? "llm_config" : "text_config";
  const Cfg v = top.Sub(vkey, {{"hidden_size", 1024},
                               {"intermediate_size", 4096},
                               {"num_hidden_layers", 24},
                               {"num_attention_heads", 16},
                               {"num_channels", 3}});
  const int64_t image =
      remote ? top.Int("force_image_size", SquareSize(v, "image_size", 448)) : SquareSize(v, "image_size", 448);
  const int64_t patch = SquareSize(v, "patch_size", 14), hidden = v.Int("hidden_size");
  const double ratio = top.Real("downsample_ratio", 0.5);
  const int64_t merge = static_cast<int64_t>(std::llround(1 / ratio));
  if (std::abs(1 / ratio - static_cast<double>(merge)) > 1e-9 || (image / patch) % merge != 0) {
    throw Error(fmt::format("{}: {} must be 1 / n for an n dividing the {} patches a side",
                            top.Where("downsample_ratio"), ratio, image / patch));
  }
  const bool qkv_bias = v.Bool(remote ? "qkv_bias" : "attention_bias", false);
  const bool rms = v.String("norm_type", "layer_norm") == "rms_norm";
  const int64_t grid = (image / patch) * (image / patch);
  const std::string tokens = fmt::format(
      "{{source: image, patch_px: {}, extra_tokens: 1, drop_tokens: 1, merge: {}, tiling: {{kind: dynamic_tiles, "
      "tile_px: {}, max_tiles: {}}}}}",
      patch, merge, image, remote ? top.Int("max_dynamic_patch", 12) : 12);
  out.Module("vision", "encoder", "image", "", tokens,
             {fmt::format("{{kind: patch_embed, patch_px: {}, hidden: {}, in_channels: {}, positions: {}}}", patch,
                          hidden, v.Int("num_channels"), grid + 2),  // the table's grid + 1 rows, the class token
              fmt::format("{{kind: transformer, count: {}, hidden: {}, ffn_hidden: {}, heads: {}, norm: {}, "
                          "norm_eps: {}, activation: {}, qkv_bias: {}, out_bias: true, mlp_bias: true}}",
                          v.Int("num_hidden_layers"), hidden, v.Int("intermediate_size"), v.Int("num_attention_heads"),
                          rms ? "rms" : "layer", Exact(v.Real("layer_norm_eps", 1e-6)),
                          ActivationYaml(v, "hidden_act", "gelu"), qkv_bias)});
  const std::string tt =
      LlmType(top, tkey, "qwen2", " (InternLM2 checkpoints: use the -hf conversion, whose text_config is llama)");
  const Cfg text = PlanningLlm(top, tkey, LlmDefaults().at(tt));
  const int64_t th = text.Int("hidden_size");
  out.Module(
      "projector", "projector", "image", "vision", "{source: inputs}",
      {fmt::format("{{kind: mlp_projector, in_dim: {}, hidden: {}, out_dim: {}}}", hidden * merge * merge, th, th)});
  // InternVLConfig ties by default; a file without the key ties as its text_config says (transformers'
  // from_pretrained keeps both matrices where the checkpoint stores both).
  EmitLlm(out, text, tt, "llm", true, "projector", "",
          top.Bool("tie_word_embeddings", text.Bool("tie_word_embeddings", false)));
  return "InternVL's dynamic tiling, layer scale and pixel shuffle are priced, not computed";
}

// Idefics3 (Idefics3Model; SmolVLM): a SigLIP tower without pooling head
// over tile_px tiles (the long side resized to 4 tiles, a global image
// besides), the pixel shuffle by scale_factor and one bias-free matrix, a
// Llama LLM.
std::string EmitIdefics3(Emitter& out, const Cfg& top) {
  const Cfg v = top.Sub("vision_config", {{"hidden_size", 1152},
                                          {"intermediate_size", 3072},
                                          {"num_hidden_layers", 12},
                                          {"num_attention_heads", 16},
                                          {"image_size", 224},
                                          {"patch_size", 32},
                                          {"num_channels", 3}});
  const int64_t image = v.Int("image_size"), patch = v.Int("patch_size"), scale = top.Int("scale_factor", 2);
  if ((image / patch) % scale != 0) {
    throw Error(
        fmt::format("{}: {} must divide the {} patches a side", top.Where("scale_factor"), scale, image / patch));
  }
  // The processor resizes the long side to size.longest_edge, 4 x the tile by default (Idefics3ImageProcessor).
  const std::string tokens = fmt::format(
      "{{source: image, patch_px: {}, merge: {}, tiling: {{kind: split_global, tile_px: {}, longest_px: {}}}}}", patch,
      scale, image, 4 * image);
  const int64_t vh = EmitVision(out, v, "siglip_vision_model", "vision", v.Int("num_hidden_layers"), 0, "", tokens);
  const std::string tt = LlmType(top, "text_config", "llama");
  const Cfg text = PlanningLlm(top, "text_config", LlmDefaults().at(tt));
  out.Module("connector", "projector", "image", "vision", "{source: inputs}",
             {fmt::format("{{kind: mlp_projector, linear: true, in_dim: {}, out_dim: {}, bias: false}}",
                          vh * scale * scale, text.Int("hidden_size"))});
  EmitLlm(out, text, tt, "llm", true, "connector", "",
          top.Bool("tie_word_embeddings", text.Bool("tie_word_embeddings", false)));
  return "Idefics3's image splitting and pixel shuffle are priced, not computed";
}

}  // namespace

std::string AnyResYaml(const Cfg& top, int64_t tile_px, const json& default_pinpoints, int64_t anyres_max) {
  const json& pins = top.Has("image_grid_pinpoints") ? top.Json().at("image_grid_pinpoints") : default_pinpoints;
  std::vector<std::string> pairs;
  if (!pins.is_array() || pins.empty()) {
    throw Error(
        fmt::format("{}: expected a non-empty list of [height, width] pairs", top.Where("image_grid_pinpoints")));
  }
  for (const auto& p : pins) {
    if (!p.is_array() || p.size() != 2 || !p[0].is_number_integer() || !p[1].is_number_integer()) {
      throw Error(fmt::format("{}: expected [height, width] pairs, got {}", top.Where("image_grid_pinpoints"),
                              p.dump().substr(0, 40)));
    }
    const int64_t ph = p[0].get<int64_t>(), pw = p[1].get<int64_t>();
    if (ph < tile_px || pw < tile_px || ph % tile_px != 0 || pw % tile_px != 0) {
      throw Error(
          fmt::format("{}: entry {}: expected [height, width], both positive multiples of tile_px {} (the "
                      "vision tower's image_size), got [{}, {}]",
                      top.Where("image_grid_pinpoints"), pairs.size(), tile_px, ph, pw));
    }
    pairs.push_back(fmt::format("[{}, {}]", ph, pw));
  }
  return fmt::format("kind: anyres, tile_px: {}, grid_pinpoints: [{}]{}", tile_px, fmt::join(pairs, ", "),
                     anyres_max > 0 ? fmt::format(", anyres_max: {}", anyres_max) : "");
}

namespace {

// LLaVA-OneVision (LlavaOnevisionModel): a SigLIP tower (every layer, no
// pooling head, all tokens), LLaVA's projector and a Qwen2 LLM, AnyRes over
// 384 px tiles with the anyres_max_9 shrink. Several images in one sample
// skip AnyRes in transformers (729 + 1 tokens each); Loom tiles every image.
std::string EmitLlavaOnevision(Emitter& out, const Cfg& top) {
  const Cfg t2 = WithDefault(WithDefault(top, "vision_feature_select_strategy", "full"), "vision_feature_layer", -1);
  const Cfg vision = top.Sub("vision_config", {{"hidden_size", 1152},
                                               {"intermediate_size", 4304},
                                               {"num_hidden_layers", 26},
                                               {"num_attention_heads", 16},
                                               {"image_size", 384},
                                               {"patch_size", 14},
                                               {"num_channels", 3}});
  const std::string tt = LlmType(top, "text_config", "qwen2");
  json pins = json::array();
  for (int64_t a = 384; a <= 2304; a += 384) {
    for (int64_t b = 384; b <= 2304; b += 384) pins.push_back({a, b});
  }
  const std::string aspect = top.String("vision_aspect_ratio", "anyres_max_9");
  int64_t anyres_max = 0;
  if (aspect.rfind("anyres_max_", 0) == 0) {
    try {
      anyres_max = std::stoll(aspect.substr(11));
    } catch (const std::exception&) {
      anyres_max = 0;
    }
    if (anyres_max < 1)
      throw Error(fmt::format("{}: '{}'; valid: anyres_max_N", top.Where("vision_aspect_ratio"), aspect));
  }
  EmitLlava(out, t2, vision, "siglip_vision_model", PlanningLlm(top, "text_config", LlmDefaults().at(tt)), tt,
            AnyResYaml(top, vision.Int("image_size"), pins, anyres_max));
  return "OneVision's AnyRes tiling is priced, not computed";
}

// Mllama (MllamaForConditionalGeneration): the vision model (a bias-free
// patch conv, class token, gated tile and aspect-ratio embeddings, 32 local
// and num_global_layers gated global layers with bias-free attention over
// all 4 tiles at once; its last and 5 intermediate layers concatenated), a
// one-matrix projector into the LLM's width, and Llama 3.1 with
// cross-attention layers at cross_attention_layers (cross-attention + MLP,
// no self-attention) reading every tile's tokens.
std::string EmitMllama(Emitter& out, const Cfg& top) {
  const Cfg v = top.Sub("vision_config", {{"hidden_size", 1280},
                                          {"intermediate_size", 5120},
                                          {"num_hidden_layers", 32},
                                          {"num_global_layers", 8},
                                          {"attention_heads", 16},
                                          {"image_size", 560},
                                          {"patch_size", 14},
                                          {"max_num_tiles", 4},
                                          {"num_channels", 3},
                                          {"vision_output_dim", 7680}});
  const int64_t h = v.Int("hidden_size"), patch = v.Int("patch_size"), image = v.Int("image_size");
  const int64_t tiles = v.Int("max_num_tiles"), grid = (image / patch) * (image / patch);
  const int64_t intermediate =
      v.Has("intermediate_layers_indices") && v.Json().at("intermediate_layers_indices").is_array()
          ? static_cast<int64_t>(v.Json().at("intermediate_layers_indices").size())
          : 5;
  if (v.Int("vision_output_dim") != h * (intermediate + 1)) {
    throw Error(fmt::format("{}: {} must be hidden_size x (1 + the {} intermediate layers) = {}",
                            v.Where("vision_output_dim"), v.Int("vision_output_dim"), intermediate,
                            h * (intermediate + 1)));
  }
  const int64_t ratios = v.Has("supported_aspect_ratios") && v.Json().at("supported_aspect_ratios").is_array()
                             ? static_cast<int64_t>(v.Json().at("supported_aspect_ratios").size())
                             : 8;
  // Learned rows: the positions and class token, the gated tile embedding
  // (one table of tiles x positions per aspect ratio and the padding id), the
  // pre- and post-tile embeddings (tiles rows per aspect ratio).
  const int64_t rows = grid + 1 + (ratios + 1) * tiles * (grid + 1) + 2 * (ratios + 1) * tiles;
  const std::string layer =
      fmt::format("hidden: {}, ffn_hidden: {}, heads: {}, norm: layer, norm_eps: {}, activation: {}, mlp_bias: true", h,
                  v.Int("intermediate_size"), v.Int("attention_heads"), Exact(v.Real("norm_eps", 1e-5)),
                  ActivationYaml(v, "hidden_act", "gelu"));
  out.Module(
      "vision", "encoder", "image", "",
      fmt::format("{{source: image, patch_px: {}, extra_tokens: 1, concat_layers: {}, tiling: {{kind: "
                  "fixed_tiles, tile_px: {}, max_tiles: {}}}}}",
                  patch, intermediate + 1, image, tiles),
      {fmt::format("{{kind: patch_embed, patch_px: {}, hidden: {}, in_channels: {}, positions: {}, bias: false}}",
                   patch, h, v.Int("num_channels"), rows),
       fmt::format("{{kind: transformer, count: {}, {}}}", v.Int("num_hidden_layers"), layer),
       fmt::format("{{kind: transformer, count: {}, {}}}", v.Int("num_global_layers"), layer)});
  const Cfg t = top.Sub("text_config", {{"vocab_size", 128256},
                                        {"hidden_size", 4096},
                                        {"intermediate_size", 14336},
                                        {"num_hidden_layers", 40},
                                        {"num_attention_heads", 32},
                                        {"num_key_value_heads", 8}});
  const int64_t th = t.Int("hidden_size"), layers = t.Int("num_hidden_layers");
  out.Module(
      "projector", "projector", "image", "vision", "{source: inputs}",
      {fmt::format("{{kind: mlp_projector, linear: true, in_dim: {}, out_dim: {}}}", v.Int("vision_output_dim"), th)});
  std::set<int64_t> cross = {3, 8, 13, 18, 23, 28, 33, 38};
  if (t.Has("cross_attention_layers")) {
    cross.clear();
    for (const auto& x : t.Json().at("cross_attention_layers")) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= layers) {
        throw Error(
            fmt::format("{}: expected layer indices from 0 to {}", t.Where("cross_attention_layers"), layers - 1));
      }
      cross.insert(x.get<int64_t>());
    }
  }
  const std::string common = fmt::format(
      "hidden: {}, ffn_hidden: {}, heads: {}, kv_heads: {}, gated_mlp: true, causal: true, norm: rms, norm_eps: {}", th,
      t.Int("intermediate_size"), t.Int("num_attention_heads"), t.Int("num_key_value_heads", 8),
      Exact(t.Real("rms_norm_eps", 1e-5)));
  std::vector<std::string> blocks;
  int64_t run = 0;
  for (int64_t l = 0; l <= layers; ++l) {
    if (l < layers && !cross.count(l)) {
      ++run;
      continue;
    }
    if (run > 0) blocks.push_back(fmt::format("count: {}, {}{}", run, common, RopeYaml(t)));
    run = 0;
    if (l < layers) {
      blocks.push_back(
          fmt::format("{}, cross_attention: true, self_attention: false, context_dim: {}, qk_norm: true", common, th));
    }
  }
  // embed_tokens has vocab_size + 8 rows (MllamaTextModel); the head vocab_size.
  EmitLlmBlocks(out, "llm", "projector", "{source: text}", t.Int("vocab_size") + 8, t.Int("vocab_size"), th,
                top.Bool("tie_word_embeddings", false), blocks);
  return "Mllama's tiled vision model and cross-attention layers are priced, not computed";
}

// Pixtral (LlavaForConditionalGeneration with a pixtral vision_config): a
// bias-free patch conv, ln_pre, RMSNorm blocks without biases with a gated
// MLP and 2-D rotary positions (no table), every image packed at its own size
// (downscaled to image_size at most) with a break token per row; LLaVA's
// projector and a Mistral LLM (head_dim 128 on Nemo).
std::string EmitPixtral(Emitter& out, const Cfg& top) {
  const Cfg v = top.Sub("vision_config", {{"hidden_size", 1024},
                                          {"intermediate_size", 4096},
                                          {"num_hidden_layers", 24},
                                          {"num_attention_heads", 16},
                                          {"image_size", 1024},
                                          {"patch_size", 16},
                                          {"num_channels", 3}});
  const int64_t all = v.Int("num_hidden_layers");
  int64_t layers = all - 1;  // LlavaConfig's default vision_feature_layer -2
  if (top.Has("vision_feature_layer")) {
    const json& f = top.Json().at("vision_feature_layer");
    if (!f.is_number_integer() || f.get<int64_t>() < -all - 1 || f.get<int64_t>() > all) {
      throw Error(
          fmt::format("{}: expected one layer index from {} to {}", top.Where("vision_feature_layer"), -all - 1, all));
    }
    layers = f.get<int64_t>() < 0 ? all + 1 + f.get<int64_t>() : f.get<int64_t>();
  }
  const int64_t h = v.Int("hidden_size"), patch = v.Int("patch_size");
  std::vector<std::string> yaml = {
      fmt::format("{{kind: patch_embed, patch_px: {}, hidden: {}, in_channels: {}, bias: false, out_norm: rms, "
                  "norm_eps: 1e-05}}",
                  patch, h, v.Int("num_channels"))};
  if (layers > 0) {
    yaml.push_back(fmt::format(
        "{{kind: transformer, count: {}, hidden: {}, ffn_hidden: {}, heads: {}, gated_mlp: true, norm: rms, "
        "norm_eps: 1e-05, activation: {}}}",
        layers, h, v.Int("intermediate_size"), v.Int("num_attention_heads"), ActivationYaml(v, "hidden_act", "gelu")));
  }
  out.Module("vision", "encoder", "image", "",
             fmt::format("{{source: image, patch_px: {}, tiling: {{kind: pixtral, longest_px: {}}}}}", patch,
                         v.Int("image_size")),
             yaml);
  const std::string tt = LlmType(top, "text_config", "mistral");
  const Cfg text = PlanningLlm(top, "text_config", LlmDefaults().at(tt));
  const int64_t th = text.Int("hidden_size");
  out.Module(
      "projector", "projector", "image", "vision", "{source: inputs}",
      {fmt::format("{{kind: mlp_projector, in_dim: {}, hidden: {}, out_dim: {}, bias: {}, activation: {}}}", h, th, th,
                   top.Bool("multimodal_projector_bias", true), ActivationYaml(top, "projector_hidden_act", "gelu"))});
  EmitLlm(out, text, tt, "llm", true, "projector", "",
          top.Bool("tie_word_embeddings", text.Bool("tie_word_embeddings", false)));
  return "Pixtral's 2-D rotary tower and per-row break tokens are priced, not computed";
}

}  // namespace

const std::vector<std::string>& VlmFamilyTypes() {
  static const std::vector<std::string> types = {"qwen2_5_vl",           "gemma3",   "gemma3_text",   "siglip2",
                                                 "siglip2_vision_model", "internvl", "internvl_chat", "idefics3",
                                                 "llava_onevision",      "mllama"};
  return types;
}

std::string EmitVlmFamily(Emitter& out, const Cfg& top, const std::string& type) {
  if (type == "qwen2_5_vl") return EmitQwen25Vl(out, top);
  if (type == "gemma3") return EmitGemma3(out, top);
  if (type == "gemma3_text") {
    EmitGemma3Text(out, Cfg(top.Json(), top.file(), "", Gemma3TextDefaults()), "",
                   top.Bool("tie_word_embeddings", true));
    return "Gemma 3's (1 + w) sandwich norms, scaled embeddings and sliding windows are priced, not computed";
  }
  if (type == "siglip2" || type == "siglip2_vision_model") return EmitSiglip2(out, top, type != "siglip2");
  if (type == "internvl" || type == "internvl_chat") return EmitInternVl(out, top, type == "internvl_chat");
  if (type == "idefics3") return EmitIdefics3(out, top);
  if (type == "llava_onevision") return EmitLlavaOnevision(out, top);
  if (type == "mllama") return EmitMllama(out, top);
  throw Error(fmt::format("{}: model_type '{}' is not a VLM family Loom reads", top.file(), type));
}

// Pixtral comes as model_type llava with a pixtral vision_config: the dispatcher asks for it.
std::string EmitPixtralLlava(Emitter& out, const Cfg& top) { return EmitPixtral(out, top); }

}  // namespace loom::hf
