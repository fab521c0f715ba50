#include "loom/cost/frozen.h"

namespace loom {

std::vector<std::vector<BackwardNeeds>> ComputeBackwardNeeds(const Model& model) {
  std::vector<std::vector<BackwardNeeds>> needs(model.modules.size());
  // trainable_upstream[m]: some trainable layer exists in m or before it (p at m's output).
  std::vector<bool> trainable_through(model.modules.size(), false);
  for (size_t i = 0; i < model.modules.size(); ++i) {  // topological order
    const Module& m = model.modules[i];
    bool earlier = false;  // p(L_{l-1}) in Eq. 3.3, strictly before the current layer
    for (int p : m.inputs) {
      earlier = earlier || trainable_through[p];
    }
    needs[i].resize(m.layers.size());
    for (size_t l = 0; l < m.layers.size(); ++l) {
      needs[i][l].weight = !m.layers[l].frozen;
      needs[i][l].data = earlier;
      earlier = earlier || !m.layers[l].frozen;
    }
    trainable_through[i] = earlier;
  }
  return needs;
}

}  // namespace loom
