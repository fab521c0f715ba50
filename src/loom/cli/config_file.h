// `loom SUBCOMMAND --config FILE`: the subcommand's flags as a YAML mapping,
// one key per flag without its dashes (`model: vlm-s`, `strategy:
// megatron,mmscale`, `wide: true`; a list repeats a flag: `kill: [1:1:3,
// 0:2:4]`). Flags on the command line take precedence over the file's.
#pragma once

#include <CLI/CLI.hpp>

#include <map>
#include <string>
#include <vector>

namespace loom::cli {

// Adds --config to every subcommand of `app` (for --help; ExpandConfig reads it).
void AddConfigFlag(CLI::App& app);

// The command line with a config file's flags in it, and where each of those
// came from.
struct ExpandedArgs {
  std::vector<std::string> args;
  std::map<std::string, std::string> origin;  // "--global-batch" -> "run.yaml:3"
};

// `args` (argv without the program name) with `--config FILE` replaced by the
// file's flags that the command line does not give, placed right after the
// subcommand. Throws loom::Error naming the file, line and key: a key that is
// not a flag of the subcommand (with a did-you-mean), a key given twice, a
// mapping as a value, `true`/`false` for a flag that takes a value, a missing
// or malformed file.
ExpandedArgs ExpandConfig(const CLI::App& app, const std::vector<std::string>& args);

// CLI11's refusal of a flag's value, said at the config file's line where the
// flag came from one (`--global-batch: 'eight' ...` lost its file and line);
// empty when it did not.
std::string ConfigOrigin(const ExpandedArgs& expanded, const std::string& message);

}  // namespace loom::cli
