#include "loom/spec/hf_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "loom/did_you_mean.h"
#include "loom/error.h"
#include "loom/spec/hf/hf_reader.h"
#include "loom/spec/hf/vlm_families.h"

namespace loom {

namespace {

using hf::Cfg;
using hf::Emitter;
using hf::LlmDefaults;
using hf::VisionDefaults;
using nlohmann::json;

std::string Known() {
  return "llama, mistral, qwen2, qwen3, vit, clip, clip_vision_model, siglip, siglip_vision_model, whisper, llava, "
         "llava_next, qwen2_vl, qwen2_5_vl, gemma3, gemma3_text, siglip2, siglip2_vision_model, internvl, "
         "internvl_chat, idefics3, llava_onevision, mllama";
}

// Architectures Loom does not read yet, each with the closest one it does and
// what to do meanwhile (issue 43): the closest shares the shape that drives
// planning (towers, projector, LLM), and the difference is named.
const std::map<std::string, std::pair<std::string, std::string>>& NearlyKnown() {
  static const std::map<std::string, std::pair<std::string, std::string>> types = {
      {"pixtral",
       {"llava",
        "a Pixtral vision tower alone: give the llava config.json that holds it (Pixtral-12B's), whose "
        "vision_config has model_type pixtral"}},
      {"phi3_v", {"llava", "a CLIP tower and a Phi-3 LLM (as llama): llava with text_config model_type llama"}},
      {"qwen3_vl",
       {"qwen2_5_vl",
        "the same patch merger family; Qwen3-VL's DeepStack taps and its tower differ: write a model "
        "YAML (docs/spec-format.md) or price it as qwen2_5_vl"}},
      {"idefics2",
       {"idefics3",
        "a SigLIP tower with a perceiver resampler (64 tokens an image): write a model YAML with "
        "out_tokens_per_image: 64"}},
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
  std::string planning_only;  // why the runtime cannot run it, for the families read for planning only
  int64_t image_token_id = -1;  // the families the runtime computes: the id their images stand as
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
  } else if (std::find(hf::VlmFamilyTypes().begin(), hf::VlmFamilyTypes().end(), type) != hf::VlmFamilyTypes().end()) {
    planning_only = hf::EmitVlmFamily(out, top, type);
  } else if (type == "llava" && top.Sub("vision_config", {}).Has("model_type") &&
             top.Sub("vision_config", {}).Type() == "pixtral") {
    planning_only = hf::EmitPixtralLlava(out, top);
  } else if (type == "llava" || type == "llava_next") {
    const Cfg vc = top.Sub("vision_config", {});
    const std::string vt = vc.Has("model_type") ? vc.Type() : "clip_vision_model";
    if (!VisionDefaults().count(vt)) {
      throw Error(fmt::format("{}: unknown vision tower '{}'; valid: vit, clip_vision_model, siglip_vision_model",
                              vc.Where("model_type"), vt));
    }
    // LlavaConfig builds a CLIP-L/14 at 336 px when vision_config is absent,
    // but CLIPVisionConfig's own defaults (B/32 at 224) for a partial one.
    const std::map<std::string, int64_t> llava_tower = {
        {"hidden_size", 1024}, {"intermediate_size", 4096}, {"num_hidden_layers", 24}, {"num_attention_heads", 16},
        {"image_size", 336},   {"patch_size", 14},          {"num_channels", 3}};
    const Cfg vision = top.Sub("vision_config", top.Has("vision_config") ? VisionDefaults().at(vt) : llava_tower);
    const std::string tt = hf::LlmType(top, "text_config", "llama");
    const Cfg text = top.Sub("text_config", LlmDefaults().at(tt));
    // LlavaConfig's image_token_index (config.json's key; image_token_id is its alias), 32000 by default.
    image_token_id = top.Int("image_token_index", top.Int("image_token_id", 32000));
    if (type == "llava_next") {
      // LLaVA-NeXT's AnyRes (LlavaNextConfig's default pinpoints): tiles of the tower's image_size.
      const nlohmann::json pins = {{336, 672}, {672, 336}, {672, 672}, {1008, 336}, {336, 1008}};
      EmitLlava(out, top, vision, vt, text, tt, hf::AnyResYaml(top, vision.Int("image_size"), pins, 0));
      planning_only = "LLaVA-NeXT's AnyRes tiling is priced, not computed";
    } else {
      EmitLlava(out, top, vision, vt, text, tt);
    }
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
  return fmt::format("model: {}\ndescription: {}\n{}{}modules:\n{}", quoted(name), quoted(description),
                     planning_only.empty() ? "" : "planning_only: " + quoted(planning_only) + "\n",
                     image_token_id < 0 ? "" : fmt::format("image_token_id: {}\n", image_token_id), out.yaml);
}

}  // namespace loom