#include "loom/weights/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <utility>

#include "loom/error.h"
#include "loom/regular_file.h"

namespace loom::weights {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian bytes; Loom reads them as they lie");

namespace {

struct DTypeRow {
  DType dtype;
  const char* name;
  int64_t bytes;
};
// The names of safetensors' `Dtype` (its Rust crate's serde spelling).
constexpr std::array<DTypeRow, 19> kDTypes = {{
    {DType::kBool, "BOOL", 1},
    {DType::kU8, "U8", 1},
    {DType::kI8, "I8", 1},
    {DType::kF8E4M3, "F8_E4M3", 1},
    {DType::kF8E5M2, "F8_E5M2", 1},
    {DType::kF8E8M0, "F8_E8M0", 1},
    {DType::kF8E4M3Fnuz, "F8_E4M3FNUZ", 1},
    {DType::kF8E5M2Fnuz, "F8_E5M2FNUZ", 1},
    {DType::kI16, "I16", 2},
    {DType::kU16, "U16", 2},
    {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2},
    {DType::kI32, "I32", 4},
    {DType::kU32, "U32", 4},
    {DType::kF32, "F32", 4},
    {DType::kI64, "I64", 8},
    {DType::kU64, "U64", 8},
    {DType::kF64, "F64", 8},
    {DType::kC64, "C64", 8},
}};

const DTypeRow& Row(DType dtype) {
  for (const DTypeRow& row : kDTypes) {
    if (row.dtype == dtype) return row;
  }
  throw std::logic_error("safetensors: a DType without a row");
}

// The Rust crate refuses headers over 100 MB (`HeaderTooLarge`): a corrupt
// length must not make Loom allocate the file's size.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// elements x size without overflow, or false.
bool CheckedBytes(const std::vector<int64_t>& shape, int64_t element_bytes, uint64_t* bytes) {
  uint64_t n = static_cast<uint64_t>(element_bytes);
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return false;
  }
  *bytes = n;
  return true;
}

std::string Where(const std::string& file, const std::string& tensor) {
  return file + ": safetensors header: tensor '" + tensor + "'";
}

uint64_t Unsigned(const nlohmann::json& v, const std::string& where) {
  if (!v.is_number_unsigned()) {
    throw Error(where + " is " + v.dump() + "; it must be a non-negative integer");
  }
  return v.get<uint64_t>();
}

TensorInfo ParseTensor(const std::string& name, const nlohmann::json& entry, const std::string& file) {
  const std::string where = Where(file, name);
  if (!entry.is_object()) throw Error(where + " is not an object with dtype, shape and data_offsets");
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!entry.contains(field)) throw Error(where + ": no '" + field + "' (it needs dtype, shape and data_offsets)");
  }
  TensorInfo t;
  t.name = name;
  const nlohmann::json& dtype = entry["dtype"];
  if (!dtype.is_string()) throw Error(where + ": dtype is " + dtype.dump() + "; it must be a string");
  t.dtype = ParseDType(dtype.get<std::string>(), where + ": dtype");
  const nlohmann::json& shape = entry["shape"];
  if (!shape.is_array()) throw Error(where + ": shape is " + shape.dump() + "; it must be a list of sizes");
  for (size_t i = 0; i < shape.size(); ++i) {
    const uint64_t d = Unsigned(shape[i], where + ": shape[" + std::to_string(i) + "]");
    if (d > static_cast<uint64_t>(INT64_MAX)) throw Error(where + ": shape[" + std::to_string(i) + "] is too large");
    t.shape.push_back(static_cast<int64_t>(d));
  }
  const nlohmann::json& offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2) {
    throw Error(where + ": data_offsets is " + offsets.dump() + "; it must be [begin, end]");
  }
  t.begin_byte = Unsigned(offsets[0], where + ": data_offsets[0]");
  t.end_byte = Unsigned(offsets[1], where + ": data_offsets[1]");
  uint64_t bytes = 0;
  if (!CheckedBytes(t.shape, DTypeBytes(t.dtype), &bytes)) throw Error(where + ": its shape's byte count overflows");
  if (t.end_byte < t.begin_byte || t.end_byte - t.begin_byte != bytes) {
    throw Error(where + ": data_offsets [" + std::to_string(t.begin_byte) + ", " + std::to_string(t.end_byte) +
                "] hold " + (t.end_byte < t.begin_byte ? std::string("a negative count of") : std::to_string(t.end_byte - t.begin_byte)) +
                " bytes; a " + DTypeName(t.dtype) + " tensor of its shape is " + std::to_string(bytes));
  }
  return t;
}

// The header's JSON. A name given twice is refused (nlohmann keeps the last;
// so does the Rust crate, whose offsets check then usually fails: a corrupt
// file either way), as is a field given twice in one tensor (the crate refuses
// it) and nesting deeper than 128 (the crate's serde limit; it also keeps the
// error messages' dump() from recursing without bound).
nlohmann::json ParseHeaderJson(std::string_view text, const std::string& file) {
  std::vector<std::set<std::string>> keys(3);  // per open object at depths 1 and 2
  std::string duplicate;
  bool too_deep = false;
  auto callback = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    if (depth > 128) too_deep = true;
    if (event == Event::object_start && depth + 1 <= 2) keys[static_cast<size_t>(depth + 1)].clear();
    if (event == Event::key && depth <= 2 && duplicate.empty()) {
      const std::string key = parsed.get<std::string>();
      if (!keys[static_cast<size_t>(depth)].insert(key).second) duplicate = key;
    }
    return !too_deep;
  };
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text.begin(), text.end(), callback);
  } catch (const nlohmann::json::exception& e) {
    if (!too_deep) throw Error(file + ": safetensors header is not JSON: " + e.what());
  }
  if (too_deep) throw Error(file + ": safetensors header nests deeper than 128 levels");
  if (!duplicate.empty()) throw Error(file + ": safetensors header: '" + duplicate + "' is named twice");
  if (!header.is_object()) throw Error(file + ": safetensors header is not a JSON object");
  return header;
}

std::map<std::string, std::string> ParseMetadata(const nlohmann::json& metadata, const std::string& file) {
  const std::string where = file + ": safetensors header: __metadata__";
  if (!metadata.is_object()) throw Error(where + " is not an object of strings");
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : metadata.items()) {
    if (!value.is_string()) throw Error(where + ": '" + key + "' is " + value.dump() + "; values must be strings");
    out[key] = value.get<std::string>();
  }
  return out;
}

// Tensors must tile the data section: the first starts at 0, each starts where
// the one before ends, the last ends at the end of the file (the Rust crate's
// `validate`). A gap or overlap means a corrupt or hand-edited file.
void CheckTiling(const std::vector<TensorInfo>& tensors, uint64_t data_bytes, const std::string& file) {
  // A tensor past the data first, by name: sorted by offset, it showed as a
  // gap before another tensor, which was blamed.
  for (const TensorInfo& t : tensors) {
    if (t.end_byte > data_bytes) {
      throw Error(Where(file, t.name) + ": data_offsets [" + std::to_string(t.begin_byte) + ", " +
                  std::to_string(t.end_byte) + "] end at byte " + std::to_string(t.end_byte) +
                  " of the data, but the file holds " + std::to_string(data_bytes) +
                  " bytes after its header (truncated, or its offsets are wrong)");
    }
  }
  uint64_t end = 0;
  for (const TensorInfo& t : tensors) {
    if (t.begin_byte != end) {
      throw Error(Where(file, t.name) + ": data_offsets start at byte " + std::to_string(t.begin_byte) + ", but " +
                  (t.begin_byte > end ? "the tensors before it end at " : "the tensor before it ends at ") +
                  std::to_string(end) + " (tensors must follow each other without gaps or overlaps)");
    }
    end = t.end_byte;
  }
  if (end != data_bytes) {
    throw Error(file + ": safetensors tensors end at byte " + std::to_string(end) + " of the data, but the file holds " +
                std::to_string(data_bytes) + " bytes after its header (truncated or with trailing bytes)");
  }
}

class FileDescriptor {
 public:
  FileDescriptor(const std::string& path, int flags, mode_t mode = 0) : fd_(::open(path.c_str(), flags, mode)) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }
  // Closes now, reporting whether the close succeeded (where a full disk can show).
  bool Close() {
    const int fd = std::exchange(fd_, -1);
    return fd < 0 || ::close(fd) == 0;
  }

 private:
  int fd_;
};

void ReadFully(int fd, uint64_t offset, std::span<std::byte> out, const std::string& path) {
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      throw Error(path + ": cannot read bytes " + std::to_string(offset + done) + ".." +
                  std::to_string(offset + out.size()) + (n < 0 ? std::string(": ") + std::strerror(errno)
                                                               : std::string(": the file ended (did it change?)")));
    }
    done += static_cast<size_t>(n);
  }
}

void WriteFully(int fd, const void* data, size_t size, const std::string& path) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error(path + ": cannot write: " + std::strerror(errno));
    p += n;
    size -= static_cast<size_t>(n);
  }
}

}  // namespace

const char* DTypeName(DType dtype) { return Row(dtype).name; }
int64_t DTypeBytes(DType dtype) { return Row(dtype).bytes; }

DType ParseDType(std::string_view name, const std::string& where) {
  std::string valid;
  for (const DTypeRow& row : kDTypes) {
    if (name == row.name) return row.dtype;
    valid += (valid.empty() ? "" : ", ") + std::string(row.name);
  }
  throw Error(where + " is '" + std::string(name) + "'; valid: " + valid);
}

int64_t TensorInfo::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsLayout ParseSafetensorsLayout(std::string_view head, uint64_t file_bytes, const std::string& file) {
  if (file_bytes < 8 || head.size() < 8) {
    throw Error(file + ": " + std::to_string(file_bytes) + " bytes; a safetensors file starts with an 8-byte header length");
  }
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, head.data(), 8);
  if (header_bytes > kMaxHeaderBytes) {
    throw Error(file + ": safetensors header length " + std::to_string(header_bytes) +
                " is over the format's 100 MB limit (not a safetensors file?)");
  }
  if (header_bytes > file_bytes - 8 || header_bytes > head.size() - 8) {
    throw Error(file + ": safetensors header length " + std::to_string(header_bytes) + " runs past the file's " +
                std::to_string(file_bytes) + " bytes (truncated, or not a safetensors file)");
  }
  const std::string_view text = head.substr(8, header_bytes);
  const size_t first = text.find_first_not_of(" \t\r\n");  // the crate accepts leading JSON whitespace
  if (first == std::string_view::npos || text[first] != '{') {
    throw Error(file + ": safetensors header does not start with '{' (not a safetensors file?)");
  }
  const nlohmann::json header = ParseHeaderJson(text, file);
  SafetensorsLayout layout;
  layout.data_offset_bytes = 8 + header_bytes;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_null()) layout.metadata = ParseMetadata(entry, file);  // null: none, as the crate reads it
    } else {
      layout.tensors.push_back(ParseTensor(name, entry, file));
    }
  }
  std::stable_sort(layout.tensors.begin(), layout.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::pair(a.begin_byte, a.end_byte) < std::pair(b.begin_byte, b.end_byte);
  });
  CheckTiling(layout.tensors, file_bytes - layout.data_offset_bytes, file);
  return layout;
}

SafetensorsFile::SafetensorsFile(std::string path) : path_(std::move(path)) {
  if (const std::string what = NotARegularFile(path_); !what.empty()) {
    throw Error(path_ + ": " + what + "; expected a safetensors file");
  }
  FileDescriptor fd(path_, O_RDONLY | O_CLOEXEC);
  if (fd.get() < 0) throw Error(path_ + ": cannot open: " + std::strerror(errno));
  const off_t size = ::lseek(fd.get(), 0, SEEK_END);
  if (size < 0) throw Error(path_ + ": cannot size: " + std::strerror(errno));
  const uint64_t file_bytes = static_cast<uint64_t>(size);
  std::string head(std::min<uint64_t>(file_bytes, 8), '\0');
  ReadFully(fd.get(), 0, std::as_writable_bytes(std::span(head)), path_);
  if (file_bytes >= 8) {
    uint64_t header_bytes = 0;
    std::memcpy(&header_bytes, head.data(), 8);
    if (header_bytes <= kMaxHeaderBytes && header_bytes <= file_bytes - 8) {
      head.resize(8 + header_bytes);
      ReadFully(fd.get(), 8, std::as_writable_bytes(std::span(head)).subspan(8), path_);
    }
  }
  layout_ = ParseSafetensorsLayout(head, file_bytes, path_);
  for (size_t i = 0; i < layout_.tensors.size(); ++i) index_[layout_.tensors[i].name] = i;
}

const TensorInfo* SafetensorsFile::Find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &layout_.tensors[it->second];
}

const TensorInfo& SafetensorsFile::At(std::string_view name) const {
  if (const TensorInfo* t = Find(name)) return *t;
  throw Error(path_ + ": no tensor '" + std::string(name) + "' (it holds " + std::to_string(layout_.tensors.size()) +
              " tensors)");
}

void SafetensorsFile::ReadAt(uint64_t offset, std::span<std::byte> out) const {
  FileDescriptor fd(path_, O_RDONLY | O_CLOEXEC);
  if (fd.get() < 0) throw Error(path_ + ": cannot open: " + std::strerror(errno));
  ReadFully(fd.get(), offset, out, path_);
}

void SafetensorsFile::Read(const TensorInfo& tensor, std::span<std::byte> out) const {
  if (out.size() != tensor.bytes()) {
    throw std::invalid_argument("SafetensorsFile::Read: the buffer is not the tensor's size");
  }
  ReadAt(layout_.data_offset_bytes + tensor.begin_byte, out);
}

void SafetensorsFile::ReadSlice(const TensorInfo& tensor, int dim, int64_t begin, int64_t end,
                                std::span<std::byte> out) const {
  const int rank = static_cast<int>(tensor.shape.size());
  if (dim < 0 || dim >= rank || begin < 0 || begin > end || end > tensor.shape[dim]) {
    throw std::invalid_argument("SafetensorsFile::ReadSlice: the slice is outside the tensor");
  }
  int64_t outer = 1;
  for (int i = 0; i < dim; ++i) outer *= tensor.shape[i];
  uint64_t inner_bytes = static_cast<uint64_t>(DTypeBytes(tensor.dtype));
  for (int i = dim + 1; i < rank; ++i) inner_bytes *= static_cast<uint64_t>(tensor.shape[i]);
  const uint64_t chunk = static_cast<uint64_t>(end - begin) * inner_bytes;
  if (out.size() != chunk * static_cast<uint64_t>(outer)) {
    throw std::invalid_argument("SafetensorsFile::ReadSlice: the buffer is not the slice's size");
  }
  FileDescriptor fd(path_, O_RDONLY | O_CLOEXEC);
  if (fd.get() < 0) throw Error(path_ + ": cannot open: " + std::strerror(errno));
  const uint64_t base = layout_.data_offset_bytes + tensor.begin_byte;
  for (int64_t o = 0; o < outer; ++o) {
    const uint64_t from = base + (static_cast<uint64_t>(o * tensor.shape[dim] + begin)) * inner_bytes;
    ReadFully(fd.get(), from, out.subspan(static_cast<size_t>(o) * chunk, chunk), path_);
  }
}

void WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<const TensorToWrite*> order;
  std::set<std::string> names;
  for (const TensorToWrite& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__") {
      throw Error(path + ": cannot save a tensor named '" + t.name + "' (reserved or empty)");
    }
    if (!names.insert(t.name).second) throw Error(path + ": two tensors named '" + t.name + "'");
    uint64_t bytes = 0;
    for (int64_t d : t.shape) {
      if (d < 0) throw Error(path + ": tensor '" + t.name + "' has a negative dimension");
    }
    if (!CheckedBytes(t.shape, DTypeBytes(t.dtype), &bytes) || bytes != t.bytes.size()) {
      throw Error(path + ": tensor '" + t.name + "' has " + std::to_string(t.bytes.size()) +
                  " bytes, not its shape's");
    }
    order.push_back(&t);
  }
  std::sort(order.begin(), order.end(), [](const TensorToWrite* a, const TensorToWrite* b) {
    const int64_t sa = DTypeBytes(a->dtype), sb = DTypeBytes(b->dtype);
    return sa != sb ? sa > sb : a->name < b->name;
  });
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const TensorToWrite* t : order) {
    header[t->name] = {{"dtype", DTypeName(t->dtype)}, {"shape", t->shape}, {"data_offsets", {offset, offset + t->bytes.size()}}};
    offset += t->bytes.size();
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {  // a name or metadata that is not UTF-8
    throw Error(path + ": cannot save: " + e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t header_bytes = text.size();

  const std::string temp = path + ".tmp." + std::to_string(::getpid());
  try {
    FileDescriptor fd(temp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd.get() < 0) throw Error(path + ": cannot write " + temp + ": " + std::strerror(errno));
    WriteFully(fd.get(), &header_bytes, 8, temp);
    WriteFully(fd.get(), text.data(), text.size(), temp);
    for (const TensorToWrite* t : order) WriteFully(fd.get(), t->bytes.data(), t->bytes.size(), temp);
    if (::fsync(fd.get()) != 0 || !fd.Close()) throw Error(path + ": cannot write " + temp + ": " + std::strerror(errno));
    if (std::rename(temp.c_str(), path.c_str()) != 0) {
      throw Error(path + ": cannot rename " + temp + " to it: " + std::strerror(errno));
    }
  } catch (...) {
    std::remove(temp.c_str());
    throw;
  }
}

}  // namespace loom::weights
