#include "loom/runtime/training_options.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "loom/error.h"

namespace loom::runtime {

LrSchedule ParseLrSchedule(const std::string& name, const std::string& flag) {
  if (name == "constant") return LrSchedule::kConstant;
  if (name == "linear") return LrSchedule::kLinear;
  if (name == "cosine") return LrSchedule::kCosine;
  throw Error(fmt::format("{} {}; valid: constant, linear, cosine", flag, name));
}

const char* LrScheduleName(LrSchedule schedule) {
  switch (schedule) {
    case LrSchedule::kConstant:
      return "constant";
    case LrSchedule::kLinear:
      return "linear";
    case LrSchedule::kCosine:
      return "cosine";
  }
  return "constant";
}

void TrainingOptions::Validate(int steps) const {
  if (!(lr > 0) || !std::isfinite(lr)) throw Error(fmt::format("--lr {}: valid: a finite number > 0", lr));
  if (warmup_steps < 0) throw Error(fmt::format("--warmup-steps {}: valid: 0 or more", warmup_steps));
  if (decay_steps < 0) throw Error(fmt::format("--decay-steps {}: valid: 0 (the run's --steps) or more", decay_steps));
  const int span = decay_steps > 0 ? decay_steps : steps;
  if (warmup_steps > span) {
    throw Error(fmt::format("--warmup-steps {} is longer than the schedule's {} steps ({}); valid: at most {}",
                            warmup_steps, span, decay_steps > 0 ? "--decay-steps" : "--steps", span));
  }
  if (!(min_lr_ratio >= 0 && min_lr_ratio <= 1)) {
    throw Error(fmt::format("--min-lr-ratio {}: valid: 0 to 1 (a fraction of --lr)", min_lr_ratio));
  }
  if (!(weight_decay >= 0) || !std::isfinite(weight_decay)) {
    throw Error(fmt::format("--weight-decay {}: valid: a finite number >= 0", weight_decay));
  }
  if (!(clip_grad >= 0) || !std::isfinite(clip_grad)) {
    throw Error(fmt::format("--clip-grad {}: valid: a finite norm > 0, or 0 for no clipping", clip_grad));
  }
}

// transformers' schedules (optimization.py): during the warmup the rate is
// lr * step / warmup (step 0 trains with 0, as LambdaLR's first value);
// after it, progress p = (step - warmup) / (span - warmup) runs from 0 to 1
// and the rate is lr * (r + (1 - r) * f(p)) with f = 1 - p (linear) or
// (1 + cos(pi p)) / 2 (cosine), r the min-lr ratio; past the span it stays at lr * r.
double TrainingOptions::LearningRateAt(int step, int steps) const {
  if (warmup_steps > 0 && step < warmup_steps) return lr * step / warmup_steps;
  if (schedule == LrSchedule::kConstant) return lr;
  const int span = decay_steps > 0 ? decay_steps : steps;
  const double p =
      span > warmup_steps ? std::min(1.0, static_cast<double>(step - warmup_steps) / (span - warmup_steps)) : 1.0;
  const double f = schedule == LrSchedule::kLinear ? 1.0 - p : 0.5 * (1.0 + std::cos(std::numbers::pi * p));
  return lr * (min_lr_ratio + (1.0 - min_lr_ratio) * f);
}

}  // namespace loom::runtime
