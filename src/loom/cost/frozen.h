// Frozen-status-aware backward (Cornstarch Eq. 3.1-3.3). A layer's backward is
// B = B_weight (unless frozen) + B_data (if some trainable layer lies earlier
// along the data flow). "Earlier" follows module edges: a trainable projector
// makes every layer of the frozen LLM after it pay backward-data.
//
// Choice (docs/cost-model.md): Eq. 3.3 sets p(L) from trainable layers "at or
// before" L, which charges B_data to the first trainable layer although
// nothing consumes its input gradient. Loom counts only layers strictly
// earlier, so a fully trainable encoder's first layer has no backward-data.
#pragma once

#include <vector>

#include "loom/spec/model.h"

namespace loom {

struct BackwardNeeds {
  bool data = false;    // compute the input gradient
  bool weight = false;  // compute the weight gradient
};

// needs[module][layer] for every layer of `model`.
std::vector<std::vector<BackwardNeeds>> ComputeBackwardNeeds(const Model& model);

}  // namespace loom
