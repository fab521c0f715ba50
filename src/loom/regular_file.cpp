#include "loom/regular_file.h"

#include <filesystem>
#include <system_error>

namespace loom {

std::string NotARegularFile(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status link = fs::symlink_status(path, ec);
  if (ec || !fs::exists(link)) return "no such file";
  const fs::file_status target = fs::status(path, ec);
  if (ec == std::errc::too_many_symbolic_link_levels) return "a symbolic link loop";
  if (ec || !fs::exists(target)) return fs::is_symlink(link) ? "a dangling symbolic link" : "no such file";
  if (fs::is_regular_file(target)) return "";
  if (fs::is_directory(target)) return "a folder";
  if (fs::is_fifo(target)) return "a pipe (FIFO)";
  return "a socket or device";
}

}  // namespace loom
