#include "loom/weights/checkpoint_weights.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <unistd.h>

#include "loom/atomic_file.h"
#include "loom/error.h"
#include "loom/regular_file.h"

namespace loom::weights {

namespace fs = std::filesystem;

namespace {

std::string ReadText(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path.string() + ": cannot open");
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// The index's weight map, checked: file names only (a shard outside the folder
// is refused, "../x" included), every value a string.
std::map<std::string, std::string> ReadWeightMap(const fs::path& index) {
  const std::string where = index.string();
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(ReadText(index));
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + ": not JSON: " + e.what());
  }
  if (!doc.is_object() || !doc.contains("weight_map") || !doc["weight_map"].is_object()) {
    throw Error(where + ": no \"weight_map\" object (the index maps each tensor name to its shard file)");
  }
  std::map<std::string, std::string> out;
  for (const auto& [name, file] : doc["weight_map"].items()) {
    if (!file.is_string()) throw Error(where + ": weight_map['" + name + "'] is " + file.dump() + "; it must be a file name");
    const std::string shard = file.get<std::string>();
    if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..") {
      throw Error(where + ": weight_map['" + name + "'] is '" + shard + "'; shards are files in the index's folder");
    }
    out[name] = shard;
  }
  return out;
}

}  // namespace

namespace {

// Weights in a format Loom does not read (transformers' pickle and the other
// frameworks'): a folder holding them and no safetensors is not "no weights".
std::string UnreadWeightFile(const std::string& dir) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const auto starts = [&](const std::string& head) { return name.rfind(head, 0) == 0; };
    const auto ends = [&](const std::string& tail) {
      return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
    };
    // transformers' pickle (sharded too), TensorFlow's and Flax's; Meta's
    // consolidated.*.pth. Not the Trainer's training_args.bin or optimizer.pt.
    if ((starts("pytorch_model") && ends(".bin")) || name == "tf_model.h5" || name == "flax_model.msgpack" ||
        (starts("consolidated") && ends(".pth"))) {
      return name;
    }
  }
  return "";
}

}  // namespace

bool CheckpointWeights::Present(const std::string& dir) {
  // Anything by either name counts (a dangling link, a folder, a pipe): the
  // constructor says what is wrong with it rather than the run starting from
  // the seed without a word; so do weights in a format not read.
  std::error_code ec;
  return fs::exists(fs::symlink_status(fs::path(dir) / kIndexFile, ec)) ||
         fs::exists(fs::symlink_status(fs::path(dir) / kSingleFile, ec)) || !UnreadWeightFile(dir).empty();
}

CheckpointWeights::CheckpointWeights(const std::string& dir) : dir_(dir) {
  const fs::path index = fs::path(dir) / kIndexFile;
  const fs::path single = fs::path(dir) / kSingleFile;
  std::error_code ec;
  for (const fs::path& p : {single, index}) {
    const std::string what = NotARegularFile(p.string());
    if (!what.empty() && what != "no such file") {
      throw Error(fmt::format("{}: {}; expected {}", p.string(), what,
                              p == single ? "the model's safetensors weights" : "a safetensors index (JSON)"));
    }
  }
  if (!fs::is_regular_file(single, ec) && !fs::is_regular_file(index, ec)) {
    if (const std::string other = UnreadWeightFile(dir); !other.empty()) {
      throw Error(
          fmt::format("{}: holds {} but no {} or {}: Loom reads safetensors weights only (transformers "
                      "writes them: save_pretrained(DIR), its default)",
                      dir, other, kSingleFile, kIndexFile));
    }
  }
  // Both present: model.safetensors, as transformers' _get_resolved_checkpoint_files chooses.
  if (!fs::is_regular_file(single, ec) && fs::is_regular_file(index, ec)) {
    const std::map<std::string, std::string> weight_map = ReadWeightMap(index);
    std::map<std::string, const SafetensorsFile*> shards;
    for (const auto& [name, shard] : weight_map) {
      if (shards.count(shard)) continue;
      const fs::path path = fs::path(dir) / shard;
      if (!fs::is_regular_file(path, ec)) {
        throw Error(index.string() + ": shard " + shard + " (of tensor '" + name + "') is missing from " + dir);
      }
      files_.push_back(std::make_unique<SafetensorsFile>(path.string()));
      shards[shard] = files_.back().get();
    }
    for (const auto& [name, shard] : weight_map) {
      const SafetensorsFile* file = shards.at(shard);
      const TensorInfo* tensor = file->Find(name);
      if (!tensor) throw Error(index.string() + ": maps '" + name + "' to " + shard + ", which has no such tensor");
      tensors_[name] = Location{file, tensor};
    }
    return;
  }
  if (!fs::is_regular_file(single, ec)) {
    throw Error(dir + ": no weights (neither " + std::string(kSingleFile) + " nor " + kIndexFile + ")");
  }
  files_.push_back(std::make_unique<SafetensorsFile>(single.string()));
  for (const TensorInfo& t : files_.back()->layout().tensors) tensors_[t.name] = Location{files_.back().get(), &t};
}

const CheckpointWeights::Location* CheckpointWeights::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

const CheckpointWeights::Location& CheckpointWeights::At(const std::string& name) const {
  if (const Location* l = Find(name)) return *l;
  throw Error(dir_ + ": the checkpoint has no tensor '" + name + "' (it has " + std::to_string(tensors_.size()) +
              "; is it another model's checkpoint?)");
}

std::vector<std::string> CheckpointWeights::Names() const {
  std::vector<std::string> out;
  for (const auto& [name, location] : tensors_) out.push_back(name);
  return out;
}

void WriteCheckpointWeights(const std::string& dir, const std::vector<TensorToWrite>& tensors,
                            uint64_t max_shard_bytes, const std::map<std::string, std::string>& metadata) {
  if (max_shard_bytes == 0) throw Error(dir + ": the shard size limit must be positive");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error(dir + ": cannot create the folder: " + ec.message());
  std::vector<const TensorToWrite*> sorted;
  uint64_t total_bytes = 0;
  for (const TensorToWrite& t : tensors) {
    sorted.push_back(&t);
    total_bytes += t.bytes.size();
  }
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->name < b->name; });
  std::vector<std::vector<TensorToWrite>> shards(1);
  uint64_t shard_bytes = 0;
  for (const TensorToWrite* t : sorted) {
    if (shard_bytes > 0 && shard_bytes + t->bytes.size() > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(*t);
    shard_bytes += t->bytes.size();
  }
  // The other layout's files and stale shards go once the new files are in
  // place (as save_pretrained removes them), so the folder never holds two
  // sets of weights that readers choose between, and a write that fails
  // midway leaves the old set readable.
  const auto remove_stale = [&](const std::set<std::string>& written) {
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      const bool shard = name.rfind("model-", 0) == 0 && name.find("-of-") != std::string::npos &&
                         entry.path().extension() == ".safetensors";
      if ((shard || name == kIndexFile || name == kSingleFile) && !written.count(name)) fs::remove(entry.path(), ec);
    }
  };
  if (shards.size() == 1) {
    WriteSafetensors((fs::path(dir) / kSingleFile).string(), shards[0], metadata);
    remove_stale({kSingleFile});
    return;
  }
  std::set<std::string> written = {kIndexFile};
  nlohmann::ordered_json index;
  index["metadata"] = {{"total_size", total_bytes}};
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  char name[64];
  for (size_t k = 0; k < shards.size(); ++k) {
    std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", k + 1, shards.size());
    WriteSafetensors((fs::path(dir) / name).string(), shards[k], metadata);
    written.insert(name);
    for (const TensorToWrite& t : shards[k]) weight_map[t.name] = name;
  }
  index["weight_map"] = weight_map;
  WriteFileAtomically((fs::path(dir) / kIndexFile).string(), index.dump(2) + "\n");
  remove_stale(written);
}

}  // namespace loom::weights
