// A Hugging Face checkpoint's weights in a stage's layers (`loom run --model
// DIR` with safetensors beside config.json). Each parameter is read from its
// file on its own; a tensor-parallel shard reads only its slice of the tensor
// (weights/safetensors.h ReadSlice), so no process holds the whole model.
//
// Names follow transformers, under each module's `weights_prefix`:
// - LLMs (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM,
//   Qwen3ForCausalLM): `model.embed_tokens`, `model.layers.N.{input_layernorm,
//   self_attn.{q,k,v,o}_proj, self_attn.{q,k}_norm, post_attention_layernorm,
//   mlp.{gate,up,down}_proj}`, `model.norm`, `lm_head`;
// - vision towers (CLIPVisionModel, SiglipVisionModel; `vision_model.`):
//   `embeddings.{patch_embedding, class_embedding, position_embedding}`,
//   `pre_layrnorm`, `encoder.layers.N.{layer_norm1, self_attn.{q,k,v,out}_proj,
//   layer_norm2, mlp.fc1, mlp.fc2}`;
// - LLaVA's projector (`multi_modal_projector.`): `linear_1`, `linear_2`.
// LLaVA's parts load from either layout transformers has saved them in
// (`language_model.model.*` or `model.language_model.*`, and so on).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "loom/runtime/torch_model.h"
#include "loom/spec/model.h"
#include "loom/weights/checkpoint_parts.h"
#include "loom/weights/checkpoint_weights.h"

namespace loom::runtime {

// The checkpoint name of one of `stack`'s parameters ("llm_3.q.weight" ->
// "model.layers.2.self_attn.q_proj.weight"). Throws loom::Error for a module
// or layer kind the mapping does not cover (naming it and what it covers).
std::string HfParameterName(const Model& model, const std::string& loom_name);

// The shape a parameter of shape `shape` has in the checkpoint: a patch
// embedding's matrix is the Conv2d's [hidden, channels, patch, patch] there, a
// class token [hidden] (the same values in the same order).
std::vector<int64_t> HfShape(const Model& model, const std::string& loom_name, const std::vector<int64_t>& shape);

// A checkpoint tensor's name in the layout Loom writes (`llava`: the model's
// modules have weights prefixes, and a LLaVA's other layouts are renamed to
// transformers 5's: `vision_tower.vision_model.X` -> `vision_tower.X`, ...).
std::string CanonicalHfName(const std::string& name, bool llava);

// Copies every parameter of `stack` from `checkpoint` (converted from F32,
// BF16 or F16 to the parameter's dtype). Throws loom::Error naming the
// checkpoint folder and the tensor: one the model needs and the checkpoint
// lacks, a shape other than the model's (another model's checkpoint), a dtype
// that is not floating point. Returns the checkpoint tensors it read, by their
// names in the checkpoint.
std::vector<std::string> LoadHfWeights(LayerStackImpl& stack, const Model& model,
                                       const weights::CheckpointWeights& checkpoint, const TensorParallel& tp);

// One process's share of a checkpoint being saved (`loom run --save DIR`,
// weights/checkpoint_parts.h): tensors under transformers' names, converted
// to the checkpoint's dtype on the host; `hold` owns the bytes `tensors` point at.
struct HfPart {
  std::vector<torch::Tensor> hold;
  std::vector<weights::TensorToWrite> tensors;
  std::map<std::string, weights::SliceOf> slices;
};

// Adds `stack`'s parameters to `part`: a TP-split one as slice tp.rank of
// tp.size along its TensorParallelDim; a whole one only when `whole` (one TP
// rank writes what every rank holds). A tied head's copy of the embedding is
// left out (transformers ties it again on load).
void AppendHfPart(LayerStackImpl& stack, const Model& model, const TensorParallel& tp, torch::ScalarType dtype,
                  bool whole, HfPart& part);

}  // namespace loom::runtime
