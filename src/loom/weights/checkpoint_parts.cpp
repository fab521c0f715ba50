#include "loom/weights/checkpoint_parts.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "loom/error.h"
#include "loom/weights/checkpoint_weights.h"

namespace loom::weights {

namespace {

constexpr const char* kSlicePrefix = "loom.slice.";

// Where one part's copy or slice of a tensor is.
struct Piece {
  const SafetensorsFile* file = nullptr;
  const TensorInfo* info = nullptr;
  SliceOf slice;
  bool sliced = false;
};

SliceOf ParseSlice(const std::string& text, const std::string& file, const std::string& tensor) {
  SliceOf s;
  char tail = 0;
  if (std::sscanf(text.c_str(), "%d/%d/%d%c", &s.dim, &s.index, &s.count, &tail) != 3 || s.count < 1 ||
      s.index < 0 || s.index >= s.count || s.dim < 0) {
    throw Error(fmt::format("{}: tensor '{}': slice entry '{}' is not DIM/INDEX/COUNT with 0 <= INDEX < COUNT",
                            file, tensor, text));
  }
  return s;
}

std::vector<std::byte> ReadWhole(const Piece& p) {
  std::vector<std::byte> bytes(p.info->bytes());
  p.file->Read(*p.info, bytes);
  return bytes;
}

// The pieces of one tensor joined: its whole bytes and shape.
struct Joined {
  std::vector<int64_t> shape;
  DType dtype = DType::kF32;
  std::vector<std::byte> bytes;
};

Joined JoinWhole(const std::string& name, const std::vector<Piece>& pieces) {
  Joined out{pieces[0].info->shape, pieces[0].info->dtype, ReadWhole(pieces[0])};
  for (size_t i = 1; i < pieces.size(); ++i) {  // copies of a replicated layer must agree
    if (pieces[i].info->shape != out.shape || pieces[i].info->dtype != out.dtype || ReadWhole(pieces[i]) != out.bytes) {
      throw Error(fmt::format("{}: tensor '{}' differs from its copy in {}", pieces[i].file->path(), name,
                              pieces[0].file->path()));
    }
  }
  return out;
}

// Whether shapes a and b have dimension `dim` and agree on every other.
bool SameBeside(std::vector<int64_t> a, const std::vector<int64_t>& b, int dim) {
  if (dim >= static_cast<int>(a.size()) || a.size() != b.size()) return false;
  a[dim] = b[dim];
  return a == b;
}

// Slices along `dim`, in index order: for each index over the dimensions
// before `dim`, every slice's contiguous run in turn. Slices agree on every
// dimension but `dim`, where theirs are SliceSpanOf's split of their sum.
Joined JoinSlices(const std::string& name, std::vector<Piece> pieces) {
  std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) { return a.slice.index < b.slice.index; });
  const Piece& first = pieces[0];
  const int count = first.slice.count, dim = first.slice.dim;
  int64_t whole = 0;
  for (int i = 0; i < static_cast<int>(pieces.size()); ++i) {
    const Piece& p = pieces[i];
    const auto where = [&] { return fmt::format("{}: tensor '{}' slice {}/{}", p.file->path(), name, p.slice.index, count); };
    if (p.slice.count != count || p.slice.dim != dim) {
      throw Error(where() + fmt::format(": split {} ways along dimension {}, but {} splits it {} ways along {}",
                                        p.slice.count, p.slice.dim, first.file->path(), count, dim));
    }
    if (p.slice.index != i) {
      throw Error(fmt::format("{}: tensor '{}': slice {} of {} is {}", p.file->path(), name,
                              p.slice.index < i ? p.slice.index : i, count,
                              p.slice.index < i ? "given twice" : "missing from every part"));
    }
    if (p.info->dtype != first.info->dtype || !SameBeside(p.info->shape, first.info->shape, dim)) {
      throw Error(where() + ": its dtype or shape differs from slice 0's in " + first.file->path() +
                  " (or it has no dimension " + std::to_string(dim) + ")");
    }
    whole += p.info->shape[dim];
  }
  if (static_cast<int>(pieces.size()) != count) {
    throw Error(fmt::format("{}: tensor '{}': slice {} of {} is missing from every part", first.file->path(), name,
                            pieces.size(), count));
  }
  for (const Piece& p : pieces) {
    if (p.info->shape[dim] != SliceSpanOf(whole, p.slice.index, count).length) {
      throw Error(
          fmt::format("{}: tensor '{}' slice {}/{} has {} entries along dimension {}; a split of {} "
                      "gives it {}",
                      p.file->path(), name, p.slice.index, count, p.info->shape[dim], dim, whole,
                      SliceSpanOf(whole, p.slice.index, count).length));
    }
  }
  Joined out{first.info->shape, first.info->dtype, {}};
  out.shape[dim] = whole;
  int64_t outer = 1, inner = DTypeBytes(out.dtype);  // inner: bytes of one entry along `dim`
  for (int d = 0; d < dim; ++d) outer *= first.info->shape[d];
  for (int d = dim + 1; d < static_cast<int>(first.info->shape.size()); ++d) inner *= first.info->shape[d];
  out.bytes.resize(static_cast<size_t>(outer * whole * inner));
  for (int i = 0; i < count; ++i) {
    const std::vector<std::byte> slice = ReadWhole(pieces[i]);
    const SliceSpan span = SliceSpanOf(whole, i, count);
    for (int64_t o = 0; o < outer; ++o) {
      std::memcpy(out.bytes.data() + (o * whole + span.begin) * inner, slice.data() + o * span.length * inner,
                  static_cast<size_t>(span.length * inner));
    }
  }
  return out;
}

}  // namespace

SliceSpan SliceSpanOf(int64_t whole, int index, int count) {
  const int64_t begin = whole * index / count;
  return {begin, whole * (index + 1) / count - begin};
}

void WriteCheckpointPart(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, SliceOf>& slices) {
  std::map<std::string, std::string> metadata;
  for (const auto& [name, s] : slices) metadata[kSlicePrefix + name] = fmt::format("{}/{}/{}", s.dim, s.index, s.count);
  WriteSafetensors(path, tensors, metadata);
}

std::vector<std::string> AssembleCheckpoint(const std::vector<std::string>& parts, const std::string& out_dir,
                                            uint64_t max_shard_bytes) {
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::map<std::string, std::vector<Piece>> pieces;
  for (const std::string& path : parts) {
    files.push_back(std::make_unique<SafetensorsFile>(path));
    const SafetensorsFile& f = *files.back();
    for (const auto& [key, value] : f.layout().metadata) {
      if (key.rfind(kSlicePrefix, 0) == 0 && f.Find(key.substr(std::strlen(kSlicePrefix))) == nullptr) {
        throw Error(fmt::format("{}: metadata '{}' marks a tensor the file does not hold", path, key));
      }
    }
    for (const TensorInfo& t : f.layout().tensors) {
      Piece p{&f, &t};
      if (const auto it = f.layout().metadata.find(kSlicePrefix + t.name); it != f.layout().metadata.end()) {
        p.slice = ParseSlice(it->second, path, t.name);
        p.sliced = true;
      }
      auto& list = pieces[t.name];
      if (!list.empty() && list[0].sliced != p.sliced) {
        throw Error(fmt::format("{}: tensor '{}' is {} here but {} in {}", path, t.name, p.sliced ? "a slice" : "whole",
                                list[0].sliced ? "a slice" : "whole", list[0].file->path()));
      }
      list.push_back(p);
    }
  }
  std::vector<Joined> joined;
  std::vector<std::string> names;
  joined.reserve(pieces.size());
  for (const auto& [name, list] : pieces) {
    joined.push_back(list[0].sliced ? JoinSlices(name, list) : JoinWhole(name, list));
    names.push_back(name);
  }
  std::vector<TensorToWrite> tensors;
  for (size_t i = 0; i < names.size(); ++i) {
    tensors.push_back({names[i], joined[i].dtype, joined[i].shape, joined[i].bytes});
  }
  WriteCheckpointWeights(out_dir, tensors, max_shard_bytes);
  return names;
}

}  // namespace loom::weights
