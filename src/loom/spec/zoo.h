// The built-in model zoo: every file in src/loom/spec/zoo/ is a model spec in
// the same YAML format users write (docs/spec-format.md), embedded in the binary.
#pragma once

#include <string>
#include <vector>

namespace loom {

// Model names in the zoo, sorted.
std::vector<std::string> ZooModelNames();
// The YAML text of zoo model `name`, or nullptr when there is none.
const char* FindZooModelText(const std::string& name);

}  // namespace loom
