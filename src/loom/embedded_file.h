// A YAML file compiled into the binary by cmake/embed_yaml.cmake (the model zoo,
// the measured GPU profiles): no install step, no lookup path.
#pragma once

namespace loom {

struct EmbeddedFile {
  const char* name;  // file name, e.g. "llama3-8b.yaml"
  const char* text;  // the YAML text
};

}  // namespace loom
