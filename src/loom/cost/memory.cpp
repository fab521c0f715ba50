#include "loom/cost/memory.h"

namespace loom {

double OptimizerStepBytesPerParam(Precision precision) { return IsMixedPrecision(precision) ? 30.0 : 28.0; }

ModelStateBytes ModelState(double trainable_params, double frozen_params, int dp, int zero_stage, Precision precision) {
  const bool mixed = IsMixedPrecision(precision);
  const double weight_bytes = mixed ? kWeightBytesPerParam : 4.0;
  const double optimizer_bytes = mixed ? kOptimizerBytesPerParam : 8.0;
  ModelStateBytes m;
  m.weights = weight_bytes * (trainable_params + frozen_params) / (zero_stage >= 3 ? dp : 1);
  m.grads = kGradBytesPerParam * trainable_params / (zero_stage >= 2 ? dp : 1);
  m.optimizer = optimizer_bytes * trainable_params / (zero_stage >= 1 ? dp : 1);
  return m;
}

}  // namespace loom
