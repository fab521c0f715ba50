#include "loom/cli/output_file.h"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <filesystem>
#include <vector>

#include "loom/atomic_file.h"
#include "loom/cli/flag_checks.h"
#include "loom/error.h"
#include "loom/path_kind.h"

namespace loom::cli {

namespace {

struct PathFlag {
  std::string flag, path;
  bool folder = false;  // an output folder (kOutputFolder), not a file
};

bool HasValidator(CLI::Option* option, const char* name) {
  try {
    option->get_validator(name);
    return true;
  } catch (const CLI::OptionNotFound&) {
    return false;
  }
}

}  // namespace

void CheckOutputs(CLI::App& command) {
  namespace fs = std::filesystem;
  std::vector<PathFlag> inputs, outputs;
  for (CLI::Option* option : command.get_options()) {
    if (option->count() == 0 || option->get_type_size() == 0) continue;  // not given, or a flag
    const bool folder = HasValidator(option, kOutputFolderValidatorName);
    const bool output = folder || HasValidator(option, kOutputValidatorName);
    for (const std::string& value : option->results()) {
      if (value.empty()) continue;
      if (output) {
        outputs.push_back({option->get_name(), value, folder});
      } else if (KindOfPath(value) != PathKind::kNone) {
        inputs.push_back({option->get_name(), value});
      }
    }
  }
  std::error_code ec;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const PathFlag& out = outputs[i];
    // Before any work: an output that cannot be written is found now, not
    // after a search of minutes (the file itself is written atomically later).
    // A folder the command fills is checked by the command (what it may hold).
    if (!out.folder) {
      if (KindOfPath(out.path) == PathKind::kDirectory) {
        throw loom::Error(fmt::format("{} {}: is a folder; give a file name", out.flag, out.path));
      }
      const fs::path parent =
          fs::path(out.path).parent_path().empty() ? fs::path(".") : fs::path(out.path).parent_path();
      if (KindOfPath(parent.string()) != PathKind::kDirectory) {
        throw loom::Error(fmt::format("{} {}: its folder {} does not exist; create it or choose another", out.flag,
                                      out.path, parent.string()));
      }
      if (access(parent.c_str(), W_OK) != 0) {
        throw loom::Error(
            fmt::format("{} {}: its folder {} is not writable; choose another", out.flag, out.path, parent.string()));
      }
    }
    for (const PathFlag& in : inputs) {
      if (fs::equivalent(out.path, in.path, ec)) {
        throw loom::Error(fmt::format("{} {}: is also {}, an input of this command; no output overwrites an input: "
                                      "choose another file",
                                      out.flag, out.path, in.flag));
      }
    }
    for (size_t j = 0; j < i; ++j) {
      if (fs::weakly_canonical(out.path, ec) == fs::weakly_canonical(outputs[j].path, ec)) {
        throw loom::Error(fmt::format("{} {} and {} {} name the same file; give each output its own", outputs[j].flag,
                                      outputs[j].path, out.flag, out.path));
      }
    }
  }
}

void WriteText(const std::string& path, const std::string& text, const char* flag) {
  try {
    WriteFileAtomically(path, text);
  } catch (const loom::Error& e) {
    throw loom::Error(fmt::format("{} {}", flag, e.what()));
  }
}

}  // namespace loom::cli
