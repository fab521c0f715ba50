// AdamW as torch.optim.AdamW(fused=True) runs it: one fused kernel per
// device and dtype updates every parameter, its two moments and its step
// count (ATen's _fused_adamw_, on CPU and CUDA), instead of libtorch's
// torch::optim::AdamW, which runs about nine elementwise kernels and two
// temporaries per parameter. On the H200 run of issue 41 (1.53 B fp32 master
// weights in ~560 tensors) that is ~5,000 launches and ~20 passes over 6 GB a
// step against one pass per tensor list: docs/runtime.md "The training loop".
//
// The arithmetic is torch.optim.AdamW's (decoupled decay p *= 1 - lr * wd,
// then the bias-corrected Adam update; betas 0.9 and 0.999, eps 1e-8, no
// amsgrad), so the parity tests against transformers with torch.optim.AdamW
// hold to rounding.
//
// Not thread-safe: one worker thread steps, saves and restores it.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <unordered_map>
#include <vector>

namespace loom::runtime {

// One parameter's AdamW state once it has taken a step.
struct AdamWMoments {
  torch::Tensor exp_avg, exp_avg_sq;
  torch::Tensor step_count;  // fp32 scalar on the parameter's device, as the fused kernel reads it
  int64_t steps = 0;         // the same count on the host (checkpoints read it without a sync)
};

class FusedAdamW {
 public:
  // Parameters sharing a weight decay (torch.optim's parameter group).
  struct Group {
    std::vector<torch::Tensor> params;
    double weight_decay = 0;
  };
  static constexpr double kBeta1 = 0.9, kBeta2 = 0.999, kEps = 1e-8;  // torch.optim.AdamW's defaults

  explicit FusedAdamW(std::vector<Group> groups);

  // One AdamW step at `lr` over the parameters that hold a gradient (one that
  // got none keeps its value and state, as torch.optim.AdamW skips it).
  void Step(double lr);
  // Drops every gradient (zero_grad(set_to_none=True)).
  void ZeroGrad();

  // The state of `p`, or nullptr before its first step.
  const AdamWMoments* StateOf(const torch::Tensor& p) const;
  // Replaces the state of `p` (a checkpoint's or a recovered peer's); steps 0
  // clears it. The moments are copied onto p's device.
  void SetState(const torch::Tensor& p, int64_t steps, const torch::Tensor& exp_avg, const torch::Tensor& exp_avg_sq);

 private:
  std::vector<Group> groups_;
  std::unordered_map<const c10::TensorImpl*, AdamWMoments> state_;
};

}  // namespace loom::runtime
