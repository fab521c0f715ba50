// fp16's unscaling (runtime/loss_scaler.h): a step's gradients, computed from
// a loss multiplied by the loss scale, divided by it again in place before
// the optimizer reads them (torch.amp.GradScaler.unscale_, Megatron-LM's
// _unscale_main_grads_and_check_for_nan). Only runtime translation units
// include this header (it includes libtorch).
#pragma once

#include <torch/torch.h>

#include <vector>

namespace loom::runtime {

// Divides each of `grads` by `scale` in place; returns whether every element
// is finite afterwards (an overflow in fp16 leaves inf or NaN, which no
// division repairs). One host read for all of them.
bool UnscaleGradients(const std::vector<torch::Tensor>& grads, double scale);

}  // namespace loom::runtime
