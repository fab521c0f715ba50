// The shipped measured profiles (src/loom/cost/profiles/*.yaml), embedded at
// build time by cmake/embed_yaml.cmake.
#pragma once

#include <vector>

#include "loom/embedded_file.h"

namespace loom::profile_data {

using loom::EmbeddedFile;
const std::vector<EmbeddedFile>& Files();

}  // namespace loom::profile_data
