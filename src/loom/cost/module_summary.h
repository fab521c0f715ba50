// Per-module totals used by `loom inspect` and by planners that size modules:
// parameters (trainable and frozen), forward FLOPs and bytes for given samples.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/cost/token_stats.h"
#include "loom/data/sample.h"
#include "loom/spec/model.h"
#include "loom/spec/precision.h"

namespace loom {

struct ModuleSummary {
  std::string name;
  int64_t params = 0;
  int64_t trainable_params = 0;
  int64_t hidden = 0;  // widest hidden size among its layers
  TokenStats tokens;
  double fwd_flops = 0;
  double fwd_bytes = 0;
  // FLOPs per byte of device-memory traffic in the forward pass.
  double compute_intensity() const { return fwd_bytes > 0 ? fwd_flops / fwd_bytes : 0; }
};

int64_t ModelParams(const Model& model);
// The whole model's training state, unsharded (cost/memory.h's ModelState at
// dp 1): weights, and for trainable parameters gradients and optimizer state.
// What one replica holds in all, and Oobleck's n0 divides.
double ModelStateTotalBytes(const Model& model, Precision precision);
// What a training checkpoint writes and loads: the weights and the optimizer
// state (fp32 master weights, Adam's m and v under mixed precision), not the
// gradients, which the next step recomputes: 14 B per trainable parameter in
// bf16 / fp16 (Megatron-LM's distributed checkpoint), 12 B in fp32, plus the
// frozen parameters' weights.
double ModelCheckpointBytes(const Model& model, Precision precision);
// One entry per module, in model order, for the given samples (tp = 1).
std::vector<ModuleSummary> SummarizeModules(const Model& model, const std::vector<Sample>& samples);

}  // namespace loom
