// The one-line status long commands print on a terminal's stderr
// (docs/cli.md): "megatron: candidate 120 of 480, 12 s elapsed, about 36 s
// left". The estimate assumes the remaining units take as long as the done
// ones on average; it is left out until one is done.
#pragma once

#include <string>

#include "loom/strategies/strategy.h"

namespace loom {

std::string FormatProgress(const Progress& progress);

}  // namespace loom
