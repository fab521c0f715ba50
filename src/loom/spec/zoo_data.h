// The built-in YAML specs, embedded at build time by cmake/embed_yaml.cmake.
#pragma once

#include <vector>

#include "loom/embedded_file.h"

namespace loom::zoo_data {

using loom::EmbeddedFile;
const std::vector<EmbeddedFile>& Files();

}  // namespace loom::zoo_data
