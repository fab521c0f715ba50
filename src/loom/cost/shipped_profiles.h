// Measured profiles shipped with Loom (profiles/*.yaml, embedded at build
// time): the cost model a GPU gets by default when it has one.
#pragma once

#include <memory>

#include "loom/spec/gpu.h"

namespace loom {

class CostModel;

// The shipped profile's model for `gpu` (docs/cost-model.md says which GPUs
// share which profile), or null when none is shipped for it.
std::shared_ptr<const CostModel> ShippedProfileModel(const GpuSpec& gpu);

}  // namespace loom
