// Chrome trace (Trace Event Format) of a simulated iteration: one process per
// simulated GPU, a compute and a communication thread each, one complete event
// per action, and a memory counter. Opens in Perfetto (ui.perfetto.dev) and
// chrome://tracing. Format: docs/simulator.md.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "loom/pipeline/schedule.h"
#include "loom/sim/sim_result.h"

namespace loom {

// `gpu_names[i]` names simulated rank i ("dp0 pp3"). REQUIRES: the result
// recorded intervals.
nlohmann::json ChromeTrace(const SimResult& result, const Schedule& schedule,
                           const std::vector<std::string>& gpu_names);
// Writes it; throws loom::Error when the file cannot be written.
void WriteChromeTrace(const std::string& path, const nlohmann::json& trace);

}  // namespace loom
