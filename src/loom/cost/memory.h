// Model-state memory of mixed-precision Adam as Megatron-LM keeps it, per GPU:
// 2 B of BF16/FP16 weights per parameter; per trainable parameter also 4 B of
// FP32 main gradient and 12 B of optimizer state (FP32 master weight, Adam m
// and v). Frozen parameters keep only their 2 B weights. ZeRO stage 1 shards the
// optimizer state over the data-parallel group, stage 2 also the gradients,
// stage 3 also the weights. Activation memory is in layer_work.h. In tf32 /
// fp32 (no mixed precision) weights and gradients take 4 B and the optimizer
// 8 B (Adam m and v; the weights are the master copy).
#pragma once

#include "loom/spec/precision.h"

namespace loom {

struct ModelStateBytes {
  double weights = 0;
  double grads = 0;
  double optimizer = 0;
  double total() const { return weights + grads + optimizer; }
};

inline constexpr double kWeightBytesPerParam = 2;
inline constexpr double kGradBytesPerParam = 4;
inline constexpr double kOptimizerBytesPerParam = 12;

// HBM bytes the fused Adam(W) step moves per trainable parameter it updates:
// mixed precision reads the fp32 main gradient, master weight, m and v and
// writes master, m, v and the 16-bit weight (16 + 14 B); without mixed
// precision it reads weight, gradient, m, v and writes weight, m, v (16 + 12 B).
double OptimizerStepBytesPerParam(Precision precision);
// Parameters one GPU's optimizer step updates: ZeRO stage >= 1 shards them over dp.
inline double OptimizerStepParams(double trainable_params, int dp, int zero_stage) {
  return trainable_params / (zero_stage >= 1 ? dp : 1);
}

// `trainable_params` and `frozen_params` are those held by one GPU (already
// divided by TP and PP); dp is the data-parallel group that ZeRO shards over.
// REQUIRES: dp >= 1, 0 <= zero_stage <= 3.
ModelStateBytes ModelState(double trainable_params, double frozen_params, int dp, int zero_stage,
                           Precision precision = Precision::kBf16);

}  // namespace loom
