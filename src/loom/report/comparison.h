// What `loom plan` shows of a comparison of strategies (computed by
// CompareStrategies, session/compare_strategies.h): the terminal table and the
// JSON it writes (the HTML report is report/html_report.h).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "loom/session/compare_strategies.h"

namespace loom {

// The table `loom plan` prints.
std::string FormatComparison(const Comparison& comparison);
// {"best", "strategies": [{"name", "config", "iteration_time_s", ...,"plan"}]} (docs/cli.md).
nlohmann::json ComparisonJson(const Comparison& comparison);

}  // namespace loom
