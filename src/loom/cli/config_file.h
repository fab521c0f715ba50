// `loom SUBCOMMAND --config FILE`: the subcommand's flags as a YAML mapping,
// one key per flag without its dashes (`model: vlm-s`, `strategy:
// megatron,mmscale`, `wide: true`; a list repeats a flag: `kill: [1:1:3,
// 0:2:4]`). Flags on the command line take precedence over the file's.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace loom::cli {

// Adds --config to every subcommand of `app` (for --help; ExpandConfig reads it).
void AddConfigFlag(CLI::App& app);

// `args` (argv without the program name) with `--config FILE` replaced by the
// file's flags that the command line does not give, placed right after the
// subcommand. Throws loom::Error naming the file, line and key: a key that is
// not a flag of the subcommand (with a did-you-mean), a mapping as a value,
// `true`/`false` for a flag that takes a value, a missing or malformed file.
std::vector<std::string> ExpandConfig(const CLI::App& app, const std::vector<std::string>& args);

}  // namespace loom::cli
