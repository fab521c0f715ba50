// What `loom plan --json` ran on, so that `loom simulate --plan FILE` alone
// replays it: the --model, --cluster, --profile and workload flags as given
// (a file's path made absolute), under the file's "problem" key
// (docs/plan-format.md).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "loom/cli/common_flags.h"

namespace loom::cli {

nlohmann::json ProblemRecord(const ProblemFlags& problem);

// Fills the flags of `problem` not given on the command line (empty model,
// cluster or workload name, profile "default", unset overrides) from the
// "problem" of the `loom plan --json` file at `path`. Throws loom::Error naming
// the file when it has none (a bare plan, or one an earlier loom wrote) and a
// flag it would fill is missing.
void FillFromRecord(ProblemFlags& problem, const std::string& path);

}  // namespace loom::cli
