// The self-contained HTML report of a strategy comparison (no network, inline
// SVG): the comparison table, a bar chart of iteration time per strategy, a
// per-GPU timeline of one iteration for the best plan and for megatron
// (forward, backward, weight-gradient, communication; gaps are idle), and
// memory curves per GPU group against capacity. Layout: docs/report.md.
#pragma once

#include <string>

#include "loom/session/compare_strategies.h"

namespace loom {

std::string HtmlReport(const Comparison& comparison);
// Writes it; throws loom::Error when the file cannot be written.
void WriteHtmlReport(const std::string& path, const Comparison& comparison);

}  // namespace loom
