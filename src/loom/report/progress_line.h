// The one-line status long commands print on a terminal's stderr
// (docs/cli.md): "megatron: candidate 120 of 480, 12 s elapsed, about 36 s
// left". `done` counts the unit in progress; the estimate assumes the rest
// take as long as the finished ones on average, and is left out until one is.
#pragma once

#include <string>

#include "loom/strategies/strategy.h"

namespace loom {

std::string FormatProgress(const Progress& progress);

}  // namespace loom
