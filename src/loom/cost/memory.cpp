#include "loom/cost/memory.h"

namespace loom {

ModelStateBytes ModelState(double trainable_params, double frozen_params, int dp, int zero_stage) {
  ModelStateBytes m;
  m.weights = kWeightBytesPerParam * (trainable_params + frozen_params) / (zero_stage >= 3 ? dp : 1);
  m.grads = kGradBytesPerParam * trainable_params / (zero_stage >= 2 ? dp : 1);
  m.optimizer = kOptimizerBytesPerParam * trainable_params / (zero_stage >= 1 ? dp : 1);
  return m;
}

}  // namespace loom
