// Writing a file a flag names (--json, --report, --svg, ...).
#pragma once

#include <filesystem>
#include <string>

namespace CLI {
class App;
}

namespace loom::cli {

// Rule 4, "no output overwrites an input", for any command: every option
// marked kOutputFile (flag_checks.h) that was given must name a file that
// is none of the command's inputs (any other option whose value names an
// existing file or folder: --model, --plan, --failures, --data, ...) and
// that no other output names, and whose folder exists and is writable.
// Throws loom::Error naming the flag and the file (both flags where two
// collide). Dispatch calls it before the command runs, so nothing is lost.
void CheckOutputs(CLI::App& command);

// Whether `inner` lies strictly inside folder `outer` (both canonical:
// std::filesystem::weakly_canonical).
bool Inside(const std::filesystem::path& inner, const std::filesystem::path& outer);

// Writes `text` to `path` atomically (atomic_file.h: a failed write, a full
// disk included, leaves the previous file whole). Throws loom::Error naming
// `flag`, `path` and the system's reason.
void WriteText(const std::string& path, const std::string& text, const char* flag);

}  // namespace loom::cli
