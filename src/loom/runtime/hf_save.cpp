#include "loom/runtime/hf_save.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <deque>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "loom/atomic_file.h"
#include "loom/error.h"
#include "loom/runtime/hf_weights.h"
#include "loom/spec/yaml_reader.h"
#include "loom/weights/checkpoint_parts.h"
#include "loom/weights/checkpoint_weights.h"

namespace loom::runtime {

namespace fs = std::filesystem;

namespace {

// save_pretrained's default max_shard_size ("50GB", decimal).
constexpr uint64_t kMaxShardBytes = 50'000'000'000ULL;

// What a Hugging Face model folder holds besides its weights, copied from the
// model's folder when present: the config, generation defaults, and the
// files of its tokenizer and image processor (so the saved folder loads with
// AutoTokenizer and AutoProcessor as the original did).
const std::set<std::string>& CompanionFiles() {
  static const std::set<std::string> names = {
      "config.json",        "generation_config.json", "tokenizer.json",   "tokenizer_config.json",
      "special_tokens_map.json", "tokenizer.model",   "vocab.json",       "merges.txt",
      "added_tokens.json",  "preprocessor_config.json", "processor_config.json", "chat_template.jinja",
      "chat_template.json", "video_preprocessor_config.json"};
  return names;
}

// Whether a file in an existing --save folder is one a save writes (so it
// may be replaced): weights, the index, a companion file, the part folder.
bool SaveWrites(const std::string& name) {
  const bool shard = name.rfind("model-", 0) == 0 && name.find("-of-") != std::string::npos &&
                     fs::path(name).extension() == ".safetensors";
  return shard || name == weights::kSingleFile || name == weights::kIndexFile || name == kSavePartsDir ||
         CompanionFiles().count(name) > 0;
}

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace

std::string SavePartPath(const std::string& save_dir, int rank) {
  return (fs::path(save_dir) / kSavePartsDir / fmt::format("part-{:05d}.safetensors", rank)).string();
}

std::string PrepareSave(const Model& model, const RunOptions& options) {
  const std::string& dir = options.save_dir;
  const std::string flag = "--save " + dir;
  if (options.nnodes > 1) {
    throw Error(flag + ": saves from one machine yet (every node would need the same folder); run with --nnodes 1");
  }
  if (model.hf_config.empty()) {
    throw Error(fmt::format("{}: writes a Hugging Face model folder, so the model must come from one: --model DIR "
                            "(with config.json) or a config.json; {} is Loom model YAML",
                            flag, model.source));
  }
  const std::string config_text = ReadTextFile(model.hf_config, "config.json");
  for (const Module& m : model.modules) {
    if (m.tokens.source == TokenSource::kVideo || m.tokens.source == TokenSource::kAudio) {
      throw Error(
          fmt::format("{}: module {} ({}) has no Hugging Face weight names in Loom yet; --save writes LLMs "
                      "(llama, mistral, qwen2, qwen3), CLIP and SigLIP towers and LLaVA",
                      flag, m.name, TokenSourceName(m.tokens.source)));
    }
  }
  std::error_code ec;
  const fs::path model_dir =
      fs::path(model.hf_config).parent_path().empty() ? fs::path(".") : fs::path(model.hf_config).parent_path();
  if (fs::exists(dir, ec)) {
    if (!fs::is_directory(dir, ec)) throw Error(flag + ": exists and is not a folder");
    if (fs::equivalent(dir, model_dir, ec)) {
      throw Error(flag + ": is the folder the model is read from; save to another folder (no output overwrites an input)");
    }
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (!SaveWrites(name)) {
        throw Error(fmt::format("{}: the folder holds {}, which a save does not write; give an empty or new folder "
                                "(a save replaces only a model folder's own files)",
                                flag, name));
      }
    }
  }
  // The dtype transformers would save the model in after from_pretrained(dtype="auto").
  const nlohmann::json config = nlohmann::json::parse(config_text);
  std::string dtype = "float32";
  for (const char* key : {"dtype", "torch_dtype"}) {
    if (config.contains(key) && config[key].is_string()) {
      dtype = Lower(config[key].get<std::string>());
      break;
    }
  }
  if (dtype != "float32" && dtype != "bfloat16" && dtype != "float16") {
    throw Error(
        fmt::format("{}: {} names dtype '{}'; Loom saves float32, bfloat16 or float16", flag, model.hf_config, dtype));
  }
  const fs::path parts = fs::path(dir) / kSavePartsDir;
  fs::remove_all(parts, ec);
  fs::create_directories(parts, ec);
  if (ec) throw Error(fmt::format("{}: cannot create {}: {}", flag, parts.string(), ec.message()));
  return dtype;
}

namespace {

// The tensors of the model's own checkpoint that no worker wrote (a LLaVA's
// vision layers past vision_feature_layer, CLIP's post_layernorm: transformers
// has them though nothing reads them), carried over byte for byte (in the
// checkpoint's dtype: they were not trained) into one more part under the
// names Loom writes; "" if none.
std::string CarryUnheld(const Model& model, const std::vector<std::string>& parts, const fs::path& parts_dir) {
  const fs::path model_dir = fs::path(model.hf_config).parent_path();
  if (!weights::CheckpointWeights::Present(model_dir.string())) return "";
  std::set<std::string> written;
  for (const std::string& p : parts) {
    const weights::SafetensorsFile file(p);  // named: a range-for over a temporary's member dangles
    for (const auto& t : file.layout().tensors) written.insert(t.name);
  }
  bool llava = false;
  for (const Module& m : model.modules) llava = llava || !m.weights_prefix.empty();
  const weights::CheckpointWeights checkpoint(model_dir.string());
  std::deque<std::vector<std::byte>> hold;  // the bytes the spans below point at
  std::vector<weights::TensorToWrite> tensors;
  for (const std::string& name : checkpoint.Names()) {
    const std::string canonical = CanonicalHfName(name, llava);
    if (written.count(canonical)) continue;
    const weights::CheckpointWeights::Location& at = checkpoint.At(name);
    hold.emplace_back(at.tensor->bytes());
    at.file->Read(*at.tensor, hold.back());
    tensors.push_back({canonical, at.tensor->dtype, at.tensor->shape, hold.back()});
  }
  if (tensors.empty()) return "";
  const std::string path = (parts_dir / "carried.safetensors").string();
  weights::WriteCheckpointPart(path, tensors, {});
  return path;
}

}  // namespace

void FinishSave(const Model& model, const RunOptions& options) {
  const fs::path dir(options.save_dir), parts_dir = dir / kSavePartsDir;
  std::vector<std::string> parts;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(parts_dir, ec)) {
    if (entry.path().extension() == ".safetensors") parts.push_back(entry.path().string());
  }
  std::sort(parts.begin(), parts.end());
  if (parts.empty()) throw Error("--save " + options.save_dir + ": no worker wrote its part of the weights");
  const std::string carried = CarryUnheld(model, parts, parts_dir);
  if (!carried.empty()) parts.push_back(carried);
  weights::AssembleCheckpoint(parts, dir.string(), kMaxShardBytes);
  const fs::path model_dir = fs::path(model.hf_config).parent_path();
  for (const std::string& name : CompanionFiles()) {
    const fs::path from = name == "config.json" ? fs::path(model.hf_config) : model_dir / name;
    if (!fs::is_regular_file(from, ec)) continue;
    WriteFileAtomically((dir / name).string(), ReadTextFile(from.string(), "tokenizer or processor", kMaxPlanBytes));
  }
  fs::remove_all(parts_dir, ec);
}

void AbandonSave(const RunOptions& options) {
  std::error_code ec;
  fs::remove_all(fs::path(options.save_dir) / kSavePartsDir, ec);
}

}  // namespace loom::runtime
