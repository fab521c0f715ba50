// The VLM families Loom reads for planning (issue 43): each config.json's
// towers, projector and LLM with the shapes, token rules and tilings of
// transformers 5.24's modeling and processing files. Loom's runtime does not
// compute these architectures exactly (Gemma 3's norms, window attention,
// tilings, cross-attention layers), so each model carries `planning_only`
// and `loom run` refuses it by name. Internal to spec/.
#pragma once

#include <string>
#include <vector>

#include "loom/spec/hf/hf_reader.h"

namespace loom::hf {

// The model_types EmitVlmFamily reads.
const std::vector<std::string>& VlmFamilyTypes();

// Emits the model of config `top` (model_type `type`, one of
// VlmFamilyTypes) and returns why the runtime cannot run it.
std::string EmitVlmFamily(Emitter& out, const Cfg& top, const std::string& type);

// The AnyRes tiling of LLaVA-NeXT and OneVision as token-rule YAML keys:
// the config's image_grid_pinpoints or `default_pinpoints`.
std::string AnyResYaml(const Cfg& top, int64_t tile_px, const json& default_pinpoints, int64_t anyres_max);

// Pixtral: model_type llava whose vision_config is model_type pixtral.
std::string EmitPixtralLlava(Emitter& out, const Cfg& top);

}  // namespace loom::hf
