#include "loom/cli/output_file.h"

#include <fmt/format.h>

#include <fstream>

#include "loom/error.h"

namespace loom::cli {

void WriteText(const std::string& path, const std::string& text, const char* flag) {
  std::ofstream out(path);
  if (!out) throw loom::Error(fmt::format("{} {}: cannot write the file", flag, path));
  out << text;
  out.close();  // a full disk shows only when the buffer is written out
  if (!out) throw loom::Error(fmt::format("{} {}: writing the file failed (disk full?)", flag, path));
}

}  // namespace loom::cli
