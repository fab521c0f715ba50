// The built-in YAML specs, embedded at build time by cmake/embed_yaml.cmake.
#pragma once

#include <vector>

namespace loom::zoo_data {

struct EmbeddedFile {
  const char* name;  // file name, e.g. "llama3-8b.yaml"
  const char* text;  // the YAML text
};

const std::vector<EmbeddedFile>& Files();

}  // namespace loom::zoo_data
