#include "loom/runtime/loss_scaler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "loom/error.h"

namespace loom::runtime {

void LossScaleOptions::Validate() const {
  // A scale the fp32 loss gradient cannot hold overflows every step.
  const double max_scale = std::numeric_limits<float>::max();
  const char* flag = dynamic ? "--initial-loss-scale" : "--loss-scale";
  if (!std::isfinite(initial_scale) || initial_scale < min_scale || initial_scale > max_scale) {
    throw Error(fmt::format("{} {}: the loss scale must be a number from {} to {} (fp32's largest)", flag,
                            initial_scale, min_scale, max_scale));
  }
  if (growth_interval < 1) {
    throw Error(
        fmt::format("--loss-scale-window {}: the loss scale grows after at least 1 clean step", growth_interval));
  }
  if (hysteresis < 1)
    throw Error(fmt::format("--hysteresis {}: the loss scale backs off after at least 1 overflow", hysteresis));
  if (!(growth_factor > 1) || !(backoff_factor > 0 && backoff_factor < 1) || !(min_scale > 0)) {
    throw Error(
        fmt::format("loss scaling: growth factor {} must exceed 1, backoff factor {} lie in (0, 1), "
                    "minimum scale {} be positive",
                    growth_factor, backoff_factor, min_scale));
  }
}

LossScaler::LossScaler(const LossScaleOptions& options)
    : options_(options), scale_(options.initial_scale), hysteresis_tracker_(options.hysteresis) {}

void LossScaler::Update(bool found_inf) {
  if (!options_.dynamic) return;
  if (found_inf) {
    growth_tracker_ = 0;
    // Megatron does not reset the hysteresis tracker on a backoff: once it is
    // spent, every overflow until the next growth backs off at once.
    if (--hysteresis_tracker_ <= 0) scale_ = std::max(scale_ * options_.backoff_factor, options_.min_scale);
    return;
  }
  if (++growth_tracker_ == options_.growth_interval) {
    growth_tracker_ = 0;
    hysteresis_tracker_ = options_.hysteresis;
    scale_ *= options_.growth_factor;
  }
}

}  // namespace loom::runtime
