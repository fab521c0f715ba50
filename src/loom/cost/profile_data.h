// The shipped measured profiles (src/loom/cost/profiles/*.yaml), embedded at
// build time by cmake/embed_yaml.cmake.
#pragma once

#include <vector>

namespace loom::profile_data {

struct EmbeddedFile {
  const char* name;  // file name, e.g. "h100.yaml"
  const char* text;  // the YAML text
};

const std::vector<EmbeddedFile>& Files();

}  // namespace loom::profile_data
