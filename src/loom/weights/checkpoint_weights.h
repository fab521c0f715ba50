// A Hugging Face checkpoint folder's weights: `model.safetensors`, or the
// shards that `model.safetensors.index.json` maps each tensor name to (as
// transformers' `save_pretrained` writes them past its shard size). Opening
// reads every header and no tensor; a tensor is read where it is used.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loom/weights/safetensors.h"

namespace loom::weights {

inline constexpr const char* kSingleFile = "model.safetensors";
inline constexpr const char* kIndexFile = "model.safetensors.index.json";

class CheckpointWeights {
 public:
  // Reads `dir`'s index (if any) and every shard's header. Throws loom::Error
  // naming the file and what is wrong: no weights at all, an index that is not
  // {"weight_map": {name: file}}, a shard named outside the folder, a missing
  // shard, a tensor the index maps to a shard that lacks it. With both files,
  // model.safetensors is read (as transformers does).
  explicit CheckpointWeights(const std::string& dir);

  // Whether `dir` holds weights (either file above).
  static bool Present(const std::string& dir);

  struct Location {
    const SafetensorsFile* file = nullptr;
    const TensorInfo* tensor = nullptr;
  };
  const Location* Find(const std::string& name) const;
  // As Find; a missing tensor is a loom::Error naming the folder.
  const Location& At(const std::string& name) const;
  // Every tensor name, sorted.
  std::vector<std::string> Names() const;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, Location> tensors_;
};

// Writes `tensors` into `dir` as transformers' `save_pretrained` lays them out:
// one model.safetensors while they fit in `max_shard_bytes`, else shards
// model-0000k-of-0000n.safetensors (tensors in name order, a shard closed
// before it would pass the limit; a tensor larger than the limit gets a shard
// of its own) and model.safetensors.index.json (metadata.total_size, the
// weight map). Every file is written atomically, the index last.
void WriteCheckpointWeights(const std::string& dir, const std::vector<TensorToWrite>& tensors,
                            uint64_t max_shard_bytes, const std::map<std::string, std::string>& metadata = {});

}  // namespace loom::weights
