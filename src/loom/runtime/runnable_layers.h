// Can the runtime build these layers? The layer kinds and features
// LayerStack builds (runtime/torch_model.h), and the widths flowing between
// them, checked before any process starts (CompileForRuntime) and again by
// each stack it builds. Torch-free.
#pragma once

#include <vector>

#include "loom/plan/plan.h"
#include "loom/spec/model.h"

namespace loom::runtime {

// Throws loom::Error naming the first layer kind (or feature) the runtime
// cannot build, or a width that does not meet the one before it.
void CheckRunnable(const Model& model, const std::vector<LayerRange>& layers);

}  // namespace loom::runtime
