// What `loom plan` shows of a comparison of strategies (computed by
// CompareStrategies, session/compare_strategies.h): the terminal table and the
// JSON it writes (the HTML report is report/html_report.h).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "loom/session/compare_strategies.h"

namespace loom {

// The table `loom plan` prints, with a legend of its configuration strings.
// Fits 160 columns (configurations cut to kConfigWidth characters, no worst
// iteration or planning time) unless `wide`.
inline constexpr size_t kConfigWidth = 58;
std::string FormatComparison(const Comparison& comparison, bool wide = false);
// {"best", "strategies": [{"name", "config", "iteration_time_s", ...,"plan"}]} (docs/cli.md).
nlohmann::json ComparisonJson(const Comparison& comparison);

}  // namespace loom
