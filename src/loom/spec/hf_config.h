// Hugging Face `config.json` files as models: anywhere a MODEL is taken
// (`--model`, `from:`), a config.json works. The config is translated into
// Loom's model YAML (docs/spec-format.md) and read by ParseModel, so the two
// share every check and default. Understood `model_type`s:
//   - LLMs: llama, mistral, qwen2, qwen3 (gated MLP, grouped-query attention,
//     causal; `tie_word_embeddings`);
//   - vision towers: vit, clip_vision_model, siglip_vision_model, and the
//     vision half of clip / siglip (their text tower becomes a text encoder);
//   - whisper: its audio encoder (the conv stem and the encoder layers);
//   - VLMs: llava (`vision_config` + 2-layer MLP projector + `text_config`)
//     and qwen2_vl (its ViT, the 2x2 patch merger, the LLM);
//   - for planning only (spec/hf/vlm_families.h; Model::planning_only):
//     llava_next, llava_onevision, qwen2_5_vl, internvl, internvl_chat,
//     idefics3, mllama, gemma3, gemma3_text, siglip2, and llava with a
//     pixtral tower, with their processors' image tilings.
// Fields a composite config leaves out take the defaults of the config
// class Transformers would use (LlamaConfig, CLIPVisionConfig, ...). Anything
// else is a loom::Error naming the file and the field (`model_type`,
// `text_config.head_dim`, ...) and what would be valid.
#pragma once

#include <string>

namespace loom {

// Whether `text` is a JSON object with "model_type" or "architectures".
bool LooksLikeHfConfig(const std::string& text);

// The Loom model YAML of the config in `json_text`; `file` names it in errors
// and `name` becomes the model's name.
std::string HfConfigToModelYaml(const std::string& json_text, const std::string& file, const std::string& name);

}  // namespace loom
