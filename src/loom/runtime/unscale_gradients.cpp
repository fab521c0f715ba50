#include "loom/runtime/unscale_gradients.h"

#include <cmath>

namespace loom::runtime {

bool UnscaleGradients(const std::vector<torch::Tensor>& grads, double scale) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> largest;
  largest.reserve(grads.size());
  for (const auto& g : grads) {
    torch::Tensor t = g;
    t.mul_(1.0 / scale);                                   // a power of two (the dynamic scale's) divides exactly
    if (t.numel() == 0) continue;                          // a ZeRO shard past its bucket's end: amax() has no value
    largest.push_back(t.abs().amax().to(torch::kDouble));  // NaN survives amax
  }
  return largest.empty() || std::isfinite(torch::stack(largest).amax().item<double>());
}

}  // namespace loom::runtime
