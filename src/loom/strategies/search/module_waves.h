// The model's modules by wave relative to the backbone (encoders before it,
// decoders after), which the strategies place and search over.
#pragma once

#include <string>
#include <vector>

#include "loom/spec/model.h"

namespace loom {

// Modules by wave relative to the backbone: upstream (encoders, projectors),
// the backbone wave (backbone and anything neither upstream nor downstream),
// downstream (decoders, generators). Upstream modules are further split into
// branches: connected chains that can run side by side.
struct ModuleWaves {
  std::vector<std::vector<std::string>> upstream_branches;
  std::vector<std::string> backbone;
  std::vector<std::string> downstream;
  // Whether `module` is in some upstream branch (an encoder or projector).
  bool IsUpstream(const std::string& module) const;
};
ModuleWaves SplitWaves(const Model& model);

}  // namespace loom
