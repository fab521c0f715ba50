// The safetensors format (Hugging Face's weight files): an 8-byte little-endian
// header length N, N bytes of JSON naming each tensor's dtype, shape and byte
// range, then the tensors' bytes, row-major and little-endian. This is Loom's
// own reader and writer, torch-free (docs/dependencies.md says why it is not a
// library): the runtime reads a plan's shards straight from the file, one
// tensor or one slice of it at a time, and never the whole model at once.
//
// Checks (those of the Rust crate's `SafeTensors::read_metadata`, each a
// loom::Error naming the file, the tensor and the field): a header length past
// the file or over 100 MB; a header that is not one JSON object; a name given
// twice; an unknown dtype (the error lists the valid ones); a negative or
// non-integer dimension; a byte range whose length is not elements x dtype
// size; ranges that leave a gap, overlap, or do not end at the end of the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace loom::weights {

// The dtypes safetensors names, with the spelling its header uses.
// (The sub-byte F4 and F6 types are refused: nothing Loom reads uses them.)
enum class DType {
  kBool, kU8, kI8, kF8E4M3, kF8E5M2, kF8E8M0, kF8E4M3Fnuz, kF8E5M2Fnuz, kI16, kU16, kF16, kBF16, kI32, kU32, kF32,
  kI64, kU64, kF64, kC64
};
const char* DTypeName(DType dtype);  // "BF16", ...
int64_t DTypeBytes(DType dtype);
// Throws loom::Error naming `where` and listing the valid names.
DType ParseDType(std::string_view name, const std::string& where);

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;    // empty: a scalar
  uint64_t begin_byte = 0;       // in the data section (after the header)
  uint64_t end_byte = 0;

  int64_t elements() const;
  uint64_t bytes() const { return end_byte - begin_byte; }
};

// A header, checked: tensors in file order (by begin_byte).
struct SafetensorsLayout {
  std::vector<TensorInfo> tensors;
  std::map<std::string, std::string> metadata;  // "__metadata__" (strings only, as the format says)
  uint64_t data_offset_bytes = 0;               // 8 + header length
};

// Parses and checks the start of a safetensors file: `head` holds at least its
// first 8 + N bytes (all of it is fine), `file_bytes` is the whole file's size.
// `file` names it in errors. Pure: the fuzzer's target.
SafetensorsLayout ParseSafetensorsLayout(std::string_view head, uint64_t file_bytes, const std::string& file);

// One safetensors file, open for reading. Reads the header when constructed;
// tensors are read on demand. Read-only after construction: safe to share.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(std::string path);

  const std::string& path() const { return path_; }
  const SafetensorsLayout& layout() const { return layout_; }
  // The tensor called `name`, or nullptr.
  const TensorInfo* Find(std::string_view name) const;
  // As Find, but a missing name is a loom::Error naming the file.
  const TensorInfo& At(std::string_view name) const;

  // The tensor's bytes into `out` (exactly tensor.bytes() long).
  void Read(const TensorInfo& tensor, std::span<std::byte> out) const;
  // Indices [begin, end) of dimension `dim` (the rest whole), as a contiguous
  // row-major tensor: a tensor-parallel shard read without the rest of it.
  // `out` is exactly the slice's bytes long.
  void ReadSlice(const TensorInfo& tensor, int dim, int64_t begin, int64_t end, std::span<std::byte> out) const;

 private:
  void ReadAt(uint64_t offset, std::span<std::byte> out) const;

  std::string path_;
  SafetensorsLayout layout_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> layout_.tensors position
};

// A tensor to write: `bytes` is elements x DTypeBytes(dtype) long, row-major, little-endian.
struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::span<const std::byte> bytes;
};

// Writes a safetensors file atomically (a temporary file beside `path`, then a
// rename). Tensors are laid out by element size, largest first, then by name
// (the Rust crate sorts by its own dtype order; both start each tensor aligned
// to its element size); the header is padded with spaces to a multiple of 8. Throws loom::Error
// for a duplicate name, a byte count that does not match the shape, or a file
// that cannot be written (naming it).
void WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace loom::weights
