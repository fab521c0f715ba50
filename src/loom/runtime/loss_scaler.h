// fp16 mixed precision's loss scaling (issue 41): the gradient that starts
// each backward is the loss scale instead of 1, so that small gradients do not
// flush to zero in fp16 (whose smallest normal number is 6.1e-5); before the
// optimizer step the fp32 gradients are divided by the scale again and, if any
// of them is not finite anywhere in the run, the step is skipped and the scale
// lowered. The policy is Megatron-LM's DynamicGradScaler
// (megatron/core/optimizer/grad_scaler.py): back off by `backoff_factor` once
// `hysteresis` overflows have been seen since the last growth, grow by
// `growth_factor` after `growth_interval` clean steps; `--loss-scale X` is its
// ConstantGradScaler. One choice differs, and docs/runtime.md says why: the
// initial scale is 2^16 (PyTorch's torch.amp.GradScaler) rather than
// Megatron's 2^32, which skips a run's first 17 steps finding the scale (the
// first overflow spends the hysteresis, 16 halve).
// Torch-free: the gradients themselves are unscaled by the step executor.
#pragma once

namespace loom::runtime {

struct LossScaleOptions {
  double initial_scale = 65536.0;  // 2^16
  bool dynamic = true;             // false: `initial_scale` all along (Megatron's --loss-scale)
  double min_scale = 1.0;          // Megatron's --min-loss-scale
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int growth_interval = 1000;  // Megatron's --loss-scale-window
  int hysteresis = 2;          // Megatron's --hysteresis

  // Throws loom::Error naming the flag (--initial-loss-scale, --loss-scale,
  // --loss-scale-window, --hysteresis) whose value no scaler could use.
  void Validate() const;
};

// The scale's state: what a step multiplies its loss gradient by, and the
// trackers that decide the next one. A plain value: every process of a run
// holds the same one, since every process sees the same overflow verdict.
class LossScaler {
 public:
  explicit LossScaler(const LossScaleOptions& options);

  double scale() const { return scale_; }
  // After a step: `found_inf` says whether any gradient of the run was not
  // finite (the step was skipped). Megatron's DynamicGradScaler.update.
  void Update(bool found_inf);
  // A checkpoint's state (weights/run_checkpoint.h), and setting it back.
  int growth_tracker() const { return growth_tracker_; }
  int hysteresis_tracker() const { return hysteresis_tracker_; }
  void Restore(double scale, int growth_tracker, int hysteresis_tracker) {
    scale_ = scale;
    growth_tracker_ = growth_tracker;
    hysteresis_tracker_ = hysteresis_tracker;
  }

 private:
  LossScaleOptions options_;
  double scale_;
  int growth_tracker_ = 0;
  int hysteresis_tracker_;
};

}  // namespace loom::runtime
