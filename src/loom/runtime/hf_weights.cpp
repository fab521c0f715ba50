#include "loom/runtime/hf_weights.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>

#include "loom/error.h"

namespace loom::runtime {

namespace {

// A Loom parameter name split: "llm_3.q.weight" -> module "llm", layer 3, rest "q.weight".
struct ParameterPath {
  std::string module;
  int layer = 0;
  std::string rest;
};

ParameterPath Split(const std::string& name) {
  const size_t dot = name.find('.');
  const size_t underscore = name.rfind('_', dot);
  if (dot == std::string::npos || underscore == std::string::npos) {
    throw std::logic_error("hf_weights: a parameter name without MODULE_LAYER.: " + name);
  }
  return {name.substr(0, underscore), std::stoi(name.substr(underscore + 1, dot - underscore - 1)), name.substr(dot + 1)};
}

// Within a transformer layer: Loom's parameter -> transformers' (LlamaDecoderLayer).
const std::map<std::string, std::string>& BlockNames() {
  static const std::map<std::string, std::string> names = {
      {"norm1.weight", "input_layernorm.weight"},
      {"q.weight", "self_attn.q_proj.weight"},
      {"q.bias", "self_attn.q_proj.bias"},
      {"k.weight", "self_attn.k_proj.weight"},
      {"k.bias", "self_attn.k_proj.bias"},
      {"v.weight", "self_attn.v_proj.weight"},
      {"v.bias", "self_attn.v_proj.bias"},
      {"o.weight", "self_attn.o_proj.weight"},
      {"o.bias", "self_attn.o_proj.bias"},
      {"q_norm.weight", "self_attn.q_norm.weight"},
      {"k_norm.weight", "self_attn.k_norm.weight"},
      {"norm2.weight", "post_attention_layernorm.weight"},
      {"gate.weight", "mlp.gate_proj.weight"},
      {"gate.bias", "mlp.gate_proj.bias"},
      {"up.weight", "mlp.up_proj.weight"},
      {"up.bias", "mlp.up_proj.bias"},
      {"down.weight", "mlp.down_proj.weight"},
      {"down.bias", "mlp.down_proj.bias"},
  };
  return names;
}

torch::ScalarType TorchDType(weights::DType dtype) {
  switch (dtype) {
    case weights::DType::kF32:
      return torch::kFloat;
    case weights::DType::kBF16:
      return torch::kBFloat16;
    case weights::DType::kF16:
      return torch::kHalf;
    case weights::DType::kF64:
      return torch::kDouble;
    default:
      return torch::kUInt8;  // refused by the caller
  }
}

std::string Shape(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

// Within a vision tower's encoder layer: Loom's parameter -> transformers'
// (CLIPEncoderLayer and SiglipEncoderLayer name theirs alike).
const std::map<std::string, std::string>& VisionBlockNames() {
  static const std::map<std::string, std::string> names = {
      {"norm1", "layer_norm1"},    {"q", "self_attn.q_proj"}, {"k", "self_attn.k_proj"}, {"v", "self_attn.v_proj"},
      {"o", "self_attn.out_proj"}, {"norm2", "layer_norm2"},  {"up", "mlp.fc1"},         {"down", "mlp.fc2"},
  };
  return names;
}

// Where a module's family keeps its weights when the config is the family's
// own (LlamaForCausalLM's `model.`, CLIPVisionModel's `vision_model.`).
std::string DefaultPrefix(const loom::Module& m) {
  switch (m.tokens.source) {
    case TokenSource::kImage:
      return "vision_model.";
    case TokenSource::kInputs:
      return "multi_modal_projector.";
    default:
      return "";
  }
}

// A parameter's name in its family, under the module's prefix; empty: none.
// `block`: the transformer layer's index among the module's transformer layers.
std::string FamilyName(const loom::Module& m, const Layer& l, int block, const std::string& rest) {
  const size_t dot = rest.rfind('.');
  const std::string owner = dot == std::string::npos ? rest : rest.substr(0, dot);
  const std::string leaf = dot == std::string::npos ? "" : rest.substr(dot + 1);  // weight, bias
  if (m.tokens.source == TokenSource::kImage) {
    switch (l.kind) {
      case LayerKind::kPatchEmbed:
        if (owner == "proj") return "embeddings.patch_embedding." + leaf;
        if (rest == "extra") return "embeddings.class_embedding";
        if (rest == "positions") return "embeddings.position_embedding.weight";
        if (owner == "norm") return "pre_layrnorm." + leaf;
        return "";
      case LayerKind::kTransformer: {
        const auto it = VisionBlockNames().find(owner);
        return it == VisionBlockNames().end() ? "" : fmt::format("encoder.layers.{}.{}.{}", block, it->second, leaf);
      }
      default:
        return "";
    }
  }
  if (m.tokens.source == TokenSource::kInputs) {
    if (l.kind != LayerKind::kMlpProjector) return "";
    if (owner == "fc1") return "linear_1." + leaf;
    if (owner == "fc2") return "linear_2." + leaf;
    return "";
  }
  if (m.tokens.source != TokenSource::kText && m.tokens.source != TokenSource::kTextAndInputs) return "";
  switch (l.kind) {
    case LayerKind::kEmbedding:
      return rest == "table" ? "model.embed_tokens.weight" : "";
    case LayerKind::kTransformer: {
      const auto it = BlockNames().find(rest);
      return it == BlockNames().end() ? "" : fmt::format("model.layers.{}.{}", block, it->second);
    }
    case LayerKind::kLmHead:
      if (rest == "norm.weight") return "model.norm.weight";
      if (rest == "proj.weight") return "lm_head.weight";
      if (rest == "tied_table") return "model.embed_tokens.weight";
      return "";
    default:
      return "";
  }
}

}  // namespace

std::string HfParameterName(const Model& model, const std::string& loom_name) {
  const ParameterPath path = Split(loom_name);
  const int mi = model.FindModule(path.module);
  if (mi < 0) throw std::logic_error("hf_weights: no module " + path.module);
  const loom::Module& m = model.modules[mi];
  const Layer& l = m.layers.at(path.layer);
  int block = 0;  // transformers counts the transformer layers alone
  for (int i = 0; i < path.layer; ++i) block += m.layers[i].kind == LayerKind::kTransformer ? 1 : 0;
  const std::string name = FamilyName(m, l, block, path.rest);
  if (name.empty()) {
    throw Error(
        fmt::format("model {}: {} layer {} ({}) parameter '{}' has no Hugging Face name in Loom yet; weights "
                    "load into LLMs (llama, mistral, qwen2, qwen3), CLIP and SigLIP vision towers and LLaVA",
                    model.source, m.name, path.layer, LayerKindName(l.kind), path.rest));
  }
  return m.weights_prefix.empty() ? DefaultPrefix(m) + name : m.weights_prefix + name;
}

std::vector<int64_t> HfShape(const Model& model, const std::string& loom_name, const std::vector<int64_t>& shape) {
  const ParameterPath path = Split(loom_name);
  const Layer& l = model.modules.at(model.FindModule(path.module)).layers.at(path.layer);
  if (l.kind != LayerKind::kPatchEmbed) return shape;
  if (path.rest == "extra" && shape.size() == 2 && shape[0] == 1) return {shape[1]};  // class_embedding [hidden]
  if (path.rest == "proj.weight") {  // the Conv2d's [hidden, channels, patch, patch] (PatchGrid's order)
    return l.temporal_patch > 1 ? std::vector<int64_t>{shape[0], l.in_channels, l.temporal_patch, l.kernel, l.kernel}
                                : std::vector<int64_t>{shape[0], l.in_channels, l.kernel, l.kernel};
  }
  return shape;
}

namespace {

// LLaVA checkpoints come in the layouts transformers has written: 5.x keeps
// the vision tower's names without `vision_model.` (what Loom writes, the
// first name); Hub checkpoints of 4.x have it; a model saved from
// LlavaModel's own module tree has its parts under `model.` (transformers'
// _checkpoint_conversion_mapping for LLaVA). Longest alternatives first.
const std::vector<std::pair<std::string, std::vector<std::string>>>& LlavaLayouts() {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> layouts = {
      {"language_model.model.", {"model.language_model."}},
      {"language_model.lm_head.", {"lm_head."}},
      {"vision_tower.", {"model.vision_tower.vision_model.", "vision_tower.vision_model.", "model.vision_tower."}},
      {"multi_modal_projector.", {"model.multi_modal_projector."}}};
  return layouts;
}

}  // namespace

std::string CanonicalHfName(const std::string& name, bool llava) {
  if (!llava) return name;
  for (const auto& [to, others] : LlavaLayouts()) {
    for (const std::string& from : others) {
      if (name.rfind(from, 0) == 0) return to + name.substr(from.size());
    }
  }
  return name;
}

namespace {

const weights::CheckpointWeights::Location* TryFindHf(const weights::CheckpointWeights& checkpoint,
                                                      const std::string& name) {
  if (const auto* found = checkpoint.Find(name)) return found;
  for (const auto& [from, others] : LlavaLayouts()) {
    if (name.rfind(from, 0) != 0) continue;
    for (const std::string& to : others) {
      if (const auto* found = checkpoint.Find(to + name.substr(from.size()))) return found;
    }
  }
  return nullptr;
}

}  // namespace

const weights::CheckpointWeights::Location& FindHf(const weights::CheckpointWeights& checkpoint,
                                                   const std::string& name) {
  if (const auto* found = TryFindHf(checkpoint, name)) return *found;
  return checkpoint.At(name);  // throws, naming the tensor
}

namespace {

// This process's part of a checkpoint tensor (its TP slice along `dim`, or
// whole at -1), in the file's dtype.
torch::Tensor ReadPart(const weights::CheckpointWeights::Location& where, const torch::Tensor& param, int dim,
                       const TensorParallel& tp) {
  const weights::TensorInfo& info = *where.tensor;
  torch::Tensor host = torch::empty(param.sizes(), torch::TensorOptions(TorchDType(info.dtype)));
  const std::span<std::byte> bytes(static_cast<std::byte*>(host.data_ptr()), host.nbytes());
  if (dim >= 0) {
    const weights::SliceSpan span = weights::SliceSpanOf(info.shape.at(dim), tp.rank, tp.size);
    where.file->ReadSlice(info, dim, span.begin, span.begin + span.length, bytes);
  } else {
    where.file->Read(info, bytes);
  }
  return host;
}

// A tied head (tie_word_embeddings) reads the embedding. If the checkpoint
// also holds the head's own matrix and it differs, transformers does not tie
// them (PreTrainedModel.tie_weights warns and keeps both): training it tied
// would not be the model transformers loads, so say so. An equal copy (a
// pickle's shared storage, converted) is tied, as there; its name is
// returned (read), else "". `key` is the embedding's table or a later
// stage's tied copy of it, `table` this process's part of it.
std::string CheckTiedHeadAgainstItsOwnMatrix(const Model& model, const weights::CheckpointWeights& checkpoint,
                                             const std::string& key, const weights::TensorInfo& table_info,
                                             const torch::Tensor& table, const torch::Tensor& param, int dim,
                                             const TensorParallel& tp) {
  const ParameterPath path = Split(key);
  if (path.rest != "table" && path.rest != "tied_table") return "";  // every other parameter: nothing to look up
  const loom::Module& m = model.modules.at(model.FindModule(path.module));
  const Layer& l = m.layers.at(path.layer);
  const bool table_part = (l.kind == LayerKind::kEmbedding && path.rest == "table") ||
                          (l.kind == LayerKind::kLmHead && path.rest == "tied_table");
  int head_layer = -1;
  for (size_t i = 0; i < m.layers.size(); ++i) {
    if (m.layers[i].kind == LayerKind::kLmHead && m.layers[i].tied) head_layer = static_cast<int>(i);
  }
  if (head_layer < 0 || !table_part) return "";
  const std::string own = HfParameterName(model, fmt::format("{}_{}.proj.weight", path.module, head_layer));
  const auto* head = TryFindHf(checkpoint, own);
  if (head == nullptr) return "";
  if (head->tensor->shape == table_info.shape &&
      torch::equal(ReadPart(*head, param, dim, tp).to(torch::kFloat), table.to(torch::kFloat))) {
    return head->tensor->name;
  }
  throw Error(
      fmt::format("{}: config.json ties the LM head to the embedding (tie_word_embeddings: true), but {} "
                  "holds its own '{}', which differs: transformers would not tie them (it warns and keeps "
                  "both). Set tie_word_embeddings: false in config.json, or drop '{}' from the weights",
                  model.hf_config, head->file->path(), head->tensor->name, head->tensor->name));
}

}  // namespace

std::vector<std::string> LoadHfWeights(LayerStackImpl& stack, const Model& model,
                                       const weights::CheckpointWeights& checkpoint, const TensorParallel& tp) {
  torch::NoGradGuard no_grad;
  std::vector<std::string> read;
  for (auto& item : stack.named_parameters()) {
    const std::string hf = HfParameterName(model, item.key());
    torch::Tensor& param = item.value();
    const weights::CheckpointWeights::Location& where = FindHf(checkpoint, hf);
    const weights::TensorInfo& info = *where.tensor;
    const int dim = tp.size > 1 ? stack.TensorParallelDim(item.key()) : -1;
    const std::vector<int64_t> whole = HfShape(model, item.key(), stack.WholeShape(item.key(), param.sizes().vec()));
    if (info.shape != whole) {
      throw Error(fmt::format("{}: tensor '{}' is {} in the checkpoint, but the model makes it {} (the checkpoint "
                              "of another model, or a config.json that does not match it?)",
                              where.file->path(), hf, Shape(info.shape), Shape(whole)));
    }
    const torch::ScalarType dtype = TorchDType(info.dtype);
    if (dtype == torch::kUInt8) {
      throw Error(fmt::format("{}: tensor '{}' is {}; weights must be F32, BF16, F16 or F64", where.file->path(), hf,
                              weights::DTypeName(info.dtype)));
    }
    const torch::Tensor host = ReadPart(where, param, dim, tp);  // the same bytes as `whole`
    if (!torch::isfinite(host).all().item<bool>()) {             // else "training diverged" at step 0, naming no file
      throw Error(
          fmt::format("{}: tensor '{}' holds values that are not finite (nan or inf)", where.file->path(), info.name));
    }
    const std::string own = CheckTiedHeadAgainstItsOwnMatrix(model, checkpoint, item.key(), info, host, param, dim, tp);
    if (!own.empty()) read.push_back(own);
    param.copy_(host.to(param.scalar_type()));
    read.push_back(info.name);
  }
  return read;
}

void AppendHfPart(LayerStackImpl& stack, const Model& model, const TensorParallel& tp, torch::ScalarType dtype,
                  bool whole, HfPart& part) {
  torch::NoGradGuard no_grad;
  weights::DType file_dtype = weights::DType::kF32;
  switch (dtype) {
    case torch::kFloat:
      break;
    case torch::kBFloat16:
      file_dtype = weights::DType::kBF16;
      break;
    case torch::kHalf:
      file_dtype = weights::DType::kF16;
      break;
    default:
      throw std::logic_error("hf_weights: a checkpoint dtype other than float32, bfloat16 or float16");
  }
  for (const auto& item : stack.named_parameters()) {
    const std::string& name = item.key();
    if (name.size() >= 10 && name.compare(name.size() - 10, 10, "tied_table") == 0) continue;
    const bool sliced = stack.IsSharded(name);
    if (!sliced && !whole) continue;
    const std::string hf = HfParameterName(model, name);
    torch::Tensor host = item.value().detach().to(torch::kCPU, dtype).contiguous();
    part.tensors.push_back({hf, file_dtype, HfShape(model, name, host.sizes().vec()),
                            std::span<const std::byte>(static_cast<const std::byte*>(host.data_ptr()), host.nbytes())});
    part.hold.push_back(std::move(host));
    if (sliced) part.slices[hf] = {stack.TensorParallelDim(name), tp.rank, tp.size};
  }
}

}  // namespace loom::runtime
