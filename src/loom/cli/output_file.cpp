#include "loom/cli/output_file.h"

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "loom/atomic_file.h"
#include "loom/cli/flag_checks.h"
#include "loom/error.h"
#include "loom/input_file.h"
#include "loom/path_kind.h"
#include "loom/spec/model.h"
#include "loom/spec/workload.h"

namespace loom::cli {

namespace {

// What stands where an output's folder should be: "does not exist", or what
// the path is instead ("is a file, not a folder").
std::string MissingFolder(const std::string& path) {
  switch (KindOfPath(path)) {
    case PathKind::kNone:
      return "does not exist";
    case PathKind::kFile:
      return "is a file, not a folder";
    default:
      return "is not a folder";
  }
}

struct PathFlag {
  std::string flag, path;
  bool folder = false;  // an output folder (kOutputFolder), not a file
};

// The files an input file names: a workload YAML's samples file, and a JSONL
// sample file's pixel files. Read only where an output names a file that
// exists already (what these could be); an input that does not parse names
// none here (the command reports it).
std::vector<std::string> FilesNamedBy(const PathFlag& in) {
  std::vector<std::string> named;
  std::string jsonl = in.flag == "--data" ? in.path : "";
  try {
    // A model's `from:` files (at any depth); a recorded problem's too (AddRecordedInputs).
    if (in.flag.rfind("--model", 0) == 0) return LoadModel(in.path).inherited_files;
    if (in.flag.rfind("--workload", 0) == 0) {
      const Workload w = LoadWorkload(in.path);
      if (!w.source.path.empty()) named.push_back(w.source.path);
      jsonl = w.source.path;
    }
    if (!jsonl.empty() && KindOfPath(jsonl) == PathKind::kFile) {
      // Each line's pixel_values file, named relative to the JSONL's folder
      // (data/jsonl_source.h); lines that do not parse are the command's to report.
      std::ifstream lines(jsonl);
      const std::filesystem::path dir = std::filesystem::path(jsonl).parent_path();
      for (std::string line; std::getline(lines, line);) {
        const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
        if (!j.is_object() || !j.contains("pixel_values") || !j["pixel_values"].is_string()) continue;
        const std::filesystem::path file = j["pixel_values"].get<std::string>();
        named.push_back(file.is_absolute() ? file.string() : (dir / file).string());
      }
    }
  } catch (const loom::Error&) {
  }
  return named;
}

// `simulate --plan FILE` reads the files its recorded problem names
// (problem_record.h): inputs as much as the flags'.
void AddRecordedInputs(std::vector<PathFlag>& inputs) {
  std::vector<PathFlag> recorded;
  for (const PathFlag& in : inputs) {
    if (in.flag != "--plan" || KindOfPath(in.path) != PathKind::kFile) continue;
    nlohmann::json file;
    try {
      file = nlohmann::json::parse(ReadInputFile(in.path, "plan JSON", kMaxPlanBytes), nullptr, false);
    } catch (const loom::Error&) {  // the command reports it
      continue;
    }
    if (!file.is_object() || !file.contains("problem") || !file["problem"].is_object()) continue;
    for (const char* key : {"model", "cluster", "profile", "workload"}) {
      const nlohmann::json& problem = file["problem"];
      if (!problem.contains(key) || !problem[key].is_string()) continue;
      const std::string path = problem[key].get<std::string>();
      if (path.empty() || KindOfPath(path) == PathKind::kNone) continue;
      recorded.push_back({fmt::format("--{} (recorded by --plan {})", key, in.path), path});
    }
  }
  inputs.insert(inputs.end(), recorded.begin(), recorded.end());
}

bool HasValidator(CLI::Option* option, const char* name) {
  try {
    option->get_validator(name);
    return true;
  } catch (const CLI::OptionNotFound&) {
    return false;
  }
}

}  // namespace

bool Inside(const std::filesystem::path& inner, const std::filesystem::path& outer) {
  auto i = inner.begin();
  for (auto o = outer.begin(); o != outer.end(); ++o, ++i) {
    if (o->empty()) continue;  // a trailing separator
    if (i == inner.end() || *i != *o) return false;
  }
  return i != inner.end();
}

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
  if (!outputs.empty()) AddRecordedInputs(inputs);  // reads the plan file: only where an output could clobber
  std::error_code ec;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const PathFlag& out = outputs[i];
    // Before any work: an output that cannot be written is found now, not
    // after a search of minutes (the file itself is written atomically later).
    // A folder the command fills is checked by the command (what it may hold);
    // one to be made needs its parent, as a file does.
    if (out.folder && KindOfPath(out.path) == PathKind::kNone) {
      const fs::path parent =
          fs::path(out.path).parent_path().empty() ? fs::path(".") : fs::path(out.path).parent_path();
      if (KindOfPath(parent.string()) != PathKind::kDirectory) {
        throw loom::Error(fmt::format("{} {}: its folder {} {}; create it or choose another", out.flag, out.path,
                                      parent.string(), MissingFolder(parent.string())));
      }
    }
    if (!out.folder) {
      if (KindOfPath(out.path) == PathKind::kDirectory) {
        throw loom::Error(fmt::format("{} {}: is a folder; give a file name", out.flag, out.path));
      }
      const fs::path parent =
          fs::path(out.path).parent_path().empty() ? fs::path(".") : fs::path(out.path).parent_path();
      if (KindOfPath(parent.string()) != PathKind::kDirectory) {
        throw loom::Error(fmt::format("{} {}: its folder {} {}; create it or choose another", out.flag, out.path,
                                      parent.string(), MissingFolder(parent.string())));
      }
      if (access(parent.c_str(), W_OK) != 0) {
        throw loom::Error(
            fmt::format("{} {}: its folder {} is not writable; choose another", out.flag, out.path, parent.string()));
      }
    }
    const fs::path out_c = fs::weakly_canonical(out.path, ec);
    for (const PathFlag& in : inputs) {
      if (fs::equivalent(out.path, in.path, ec)) {
        throw loom::Error(
            fmt::format("{} {}: is also {}, an input of this command; no output overwrites an input: "
                        "choose another file",
                        out.flag, out.path, in.flag));
      }
      // A file of an input folder (a model's config.json or weights) is an
      // input too: an output may add to the folder, never replace its files (a
      // folder output checks what it holds itself: hf_save.h).
      if (!out.folder && KindOfPath(in.path) == PathKind::kDirectory && KindOfPath(out.path) != PathKind::kNone &&
          Inside(out_c, fs::weakly_canonical(in.path, ec))) {
        throw loom::Error(
            fmt::format("{} {}: is a file of {} {}, an input of this command; no output overwrites an "
                        "input: choose a file outside it",
                        out.flag, out.path, in.flag, in.path));
      }
      // A file the input names (a workload's samples, a sample's pixels).
      if (KindOfPath(out.path) == PathKind::kFile && KindOfPath(in.path) == PathKind::kFile) {
        for (const std::string& named : FilesNamedBy(in)) {
          if (fs::equivalent(out.path, named, ec)) {
            throw loom::Error(
                fmt::format("{} {}: is a file {} {} names; no output overwrites an input: choose "
                            "another file",
                            out.flag, out.path, in.flag, in.path));
          }
        }
      }
    }
    for (size_t j = 0; j < i; ++j) {
      const fs::path other_c = fs::weakly_canonical(outputs[j].path, ec);
      if (out_c == other_c) {
        throw loom::Error(fmt::format("{} {} and {} {} name the same file; give each output its own", outputs[j].flag,
                                      outputs[j].path, out.flag, out.path));
      }
      // Nothing is written into a folder another output fills (--save DIR).
      const PathFlag* folder = outputs[j].folder && Inside(out_c, other_c) ? &outputs[j]
                               : out.folder && Inside(other_c, out_c)      ? &out
                                                                           : nullptr;
      if (folder != nullptr) {
        const PathFlag& inner = folder == &out ? outputs[j] : out;
        throw loom::Error(fmt::format("{} {}: is inside {} {}, which that flag fills; give each output its own place",
                                      inner.flag, inner.path, folder->flag, folder->path));
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
