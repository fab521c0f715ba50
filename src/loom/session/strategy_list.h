// The strategies a comparison runs, from the list a user gives: `loom plan
// --strategy` and the Python module's `plan(strategies=...)` both read it
// here, so both accept and refuse the same lists. Torch-free.
#pragma once

#include <string>
#include <vector>

namespace loom {

// `list`: NAME[,NAME...] of registered strategies (variants included), or
// "all" (StrategyNames()). Throws loom::Error naming `flag` (--strategy, or
// the Python argument) for an empty list, an unknown (or empty) name,
// listing the valid ones, and a strategy named twice: a comparison runs each
// once.
std::vector<std::string> ParseStrategyList(const std::string& list, const std::string& flag = "--strategy");

}  // namespace loom
