#include "loom/input_file.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>

#include "loom/error.h"
#include "loom/human_bytes.h"
#include "loom/path_kind.h"

namespace loom {

namespace {

std::ifstream OpenInput(const std::string& path, const std::string& what) {
  const PathKind kind = KindOfPath(path);
  if (kind == PathKind::kDirectory) throw Error(fmt::format("{}: is a directory; expected a {} file", path, what));
  if (kind == PathKind::kNone) throw Error(fmt::format("{}: no such file; expected a {} file", path, what));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot open the {} file: {}", path, what, std::strerror(errno)));
  return in;
}

}  // namespace

std::string ReadInputFile(const std::string& path, const std::string& what, int64_t max_bytes) {
  std::ifstream in = OpenInput(path, what);
  std::string text;
  char buffer[1 << 16];
  while (in) {
    in.read(buffer, sizeof(buffer));
    const std::streamsize n = in.gcount();
    if (static_cast<int64_t>(text.size()) + n > max_bytes) {
      throw Error(fmt::format("{}: larger than {}, more than any {} file holds; is it the right file?", path,
                              HumanBytes(static_cast<double>(max_bytes)), what));
    }
    text.append(buffer, static_cast<size_t>(n));
  }
  if (in.bad()) throw Error(fmt::format("{}: cannot read the {} file", path, what));
  return text;
}

InputLines::InputLines(const std::string& path, const std::string& what, int64_t max_line_bytes)
    : path_(path), what_(what), max_line_bytes_(max_line_bytes), in_(OpenInput(path, what)) {}

bool InputLines::Next(std::string& line) {
  line.clear();
  std::streambuf* in = in_.rdbuf();
  bool any = false;
  const int64_t start = read_bytes_;
  for (;;) {
    const int c = in->sbumpc();
    if (c == std::char_traits<char>::eof()) break;
    ++read_bytes_;
    any = true;
    if (c == '\n') break;
    if (static_cast<int64_t>(line.size()) >= max_line_bytes_) {
      throw Error(fmt::format("{}:{}: a line longer than {}, more than any {} line holds; is it the right file?", path_,
                              line_number_ + 1, HumanBytes(static_cast<double>(max_line_bytes_)), what_));
    }
    line.push_back(static_cast<char>(c));
  }
  if (!any) return false;
  ++line_number_;
  line_offset_ = start;
  return true;
}

}  // namespace loom
