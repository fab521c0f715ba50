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

}  // namespace

std::string HfParameterName(const Model& model, const std::string& loom_name) {
  const ParameterPath path = Split(loom_name);
  const int mi = model.FindModule(path.module);
  if (mi < 0) throw std::logic_error("hf_weights: no module " + path.module);
  const loom::Module& m = model.modules[mi];
  const Layer& l = m.layers.at(path.layer);
  if (m.tokens.source != TokenSource::kText) {
    throw Error(fmt::format("model {}: module {} ({}) has no Hugging Face weight names in Loom yet; weights load "
                            "into text-only language models (llama, mistral, qwen2, qwen3)",
                            model.source, m.name, TokenSourceName(m.tokens.source)));
  }
  switch (l.kind) {
    case LayerKind::kEmbedding:
      if (path.rest == "table") return "model.embed_tokens.weight";
      break;
    case LayerKind::kTransformer: {
      int index = 0;  // transformers counts the decoder layers alone
      for (int i = 0; i < path.layer; ++i) index += m.layers[i].kind == LayerKind::kTransformer ? 1 : 0;
      const auto it = BlockNames().find(path.rest);
      if (it != BlockNames().end()) return fmt::format("model.layers.{}.{}", index, it->second);
      break;
    }
    case LayerKind::kLmHead:
      if (path.rest == "norm.weight") return "model.norm.weight";
      if (path.rest == "proj.weight") return "lm_head.weight";
      if (path.rest == "tied_table") return "model.embed_tokens.weight";
      break;
    default:
      break;
  }
  throw Error(fmt::format("model {}: {} layer {} ({}) parameter '{}' has no Hugging Face name in Loom yet", model.source,
                          m.name, path.layer, LayerKindName(l.kind), path.rest));
}

void LoadHfWeights(LayerStackImpl& stack, const Model& model, const weights::CheckpointWeights& checkpoint,
                   const TensorParallel& tp) {
  torch::NoGradGuard no_grad;
  for (auto& item : stack.named_parameters()) {
    const std::string hf = HfParameterName(model, item.key());
    torch::Tensor& param = item.value();
    const weights::CheckpointWeights::Location& where = checkpoint.At(hf);
    const weights::TensorInfo& info = *where.tensor;
    const int dim = tp.size > 1 ? LayerStackImpl::TensorParallelDim(item.key()) : -1;
    std::vector<int64_t> whole = param.sizes().vec();
    if (dim >= 0) whole[dim] *= tp.size;
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
    torch::Tensor host = torch::empty(param.sizes(), torch::TensorOptions(dtype));
    const std::span<std::byte> bytes(static_cast<std::byte*>(host.data_ptr()), host.nbytes());
    if (dim >= 0) {
      const int64_t local = param.size(dim);
      where.file->ReadSlice(info, dim, tp.rank * local, (tp.rank + 1) * local, bytes);
    } else {
      where.file->Read(info, bytes);
    }
    param.copy_(host.to(param.scalar_type()));
  }
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
    part.tensors.push_back({hf, file_dtype, host.sizes().vec(),
                            std::span<const std::byte>(static_cast<const std::byte*>(host.data_ptr()), host.nbytes())});
    part.hold.push_back(std::move(host));
    if (sliced) part.slices[hf] = {LayerStackImpl::TensorParallelDim(name), tp.rank, tp.size};
  }
}

}  // namespace loom::runtime
