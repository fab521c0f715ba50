// "Did you mean ...?" for a name that is not one of the valid ones (a model,
// cluster, GPU, workload or strategy): every step's loaders use it, so it sits
// beside error.h at the bottom.
#pragma once

#include <string>
#include <vector>

namespace loom {

// The valid name closest to `given`: equal but for case, or within an edit
// distance of about a third of its length (insertions, deletions,
// substitutions and swaps of neighbours, case ignored), or the only one that
// starts with it. "" when none is close. Ties go to the first in `valid`.
std::string ClosestName(const std::string& given, const std::vector<std::string>& valid);

// "; did you mean 'h100'?" for ClosestName, or "".
std::string DidYouMean(const std::string& given, const std::vector<std::string>& valid);

}  // namespace loom
