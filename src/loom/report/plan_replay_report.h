// Output of `loom simulate --plan`: the replay of a plan file's batches
// (session/plan_file_replay.h) as text or JSON (docs/cli.md).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "loom/session/plan_file_replay.h"

namespace loom {

// A header line (the mean iteration time, the first batch's MFU, bubble and
// memory), then a line per batch, beside its recorded time when the file has one.
std::string FormatPlanFileReplay(const PlanFileReplay& replay, const std::string& path);

// The first batch's PlanMetricsJson with "iteration_time_s" the mean over the
// batches, and "batches": [{"iteration", "iteration_time_s",
// "recorded_iteration_time_s" (when recorded)}].
nlohmann::json PlanFileReplayJson(const PlanFileReplay& replay);

}  // namespace loom
