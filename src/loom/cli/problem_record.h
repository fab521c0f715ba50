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
// "problem" of the `loom plan --json` file at `path`: the plan was made for that
// batch, so a replay given only --model and --cluster still uses it. Throws
// loom::Error naming the file when it records none (a bare plan, or one an
// earlier loom wrote) and --model or --cluster is missing.
void FillFromRecord(ProblemFlags& problem, const std::string& path);

// `loom run --plan FILE`: the workload flags not given (the workload's name
// only when `take_name`, i.e. no --data names the samples) from the file's
// recorded problem; nothing when it records none. Throws loom::Error naming the
// file for a malformed or out-of-range record.
void FillWorkloadFromRecord(WorkloadFlags& workload, const std::string& path, bool take_name);

}  // namespace loom::cli
