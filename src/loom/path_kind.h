// What a user-given path names, asked without throwing. std::filesystem's
// throwing overloads raise filesystem_error for a name past the system's
// limit or a folder without permission (found by fuzz/cluster_fuzzer.cpp);
// every caller turns "none" into a loom::Error that names its flag or field.
#pragma once

#include <filesystem>
#include <string>
#include <system_error>

namespace loom {

enum class PathKind { kNone, kFile, kDirectory, kOther };

inline PathKind KindOfPath(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec) return PathKind::kNone;
  if (std::filesystem::is_regular_file(status)) return PathKind::kFile;
  if (std::filesystem::is_directory(status)) return PathKind::kDirectory;
  return std::filesystem::exists(status) ? PathKind::kOther : PathKind::kNone;
}

// A path read as an input file: a regular file, or a pipe or device
// (`--workload <(...)`, /dev/stdin). ReadInputFile (input_file.h) bounds
// what it reads, so /dev/zero is an error, not a hang.
inline bool IsInputFile(PathKind kind) { return kind == PathKind::kFile || kind == PathKind::kOther; }

}  // namespace loom
