// The training loop's choices a user sets on `loom run` (issue 42): the
// learning-rate schedule, AdamW's weight decay and which tensors it applies
// to, gradient clipping by the global norm, and what a non-finite loss or
// gradient norm does. Torch-free: the CLI validates it and the launcher
// computes the same learning rate its workers use.
#pragma once

#include <string>

namespace loom::runtime {

// How the learning rate moves after the warmup (transformers'
// get_constant_schedule_with_warmup, get_linear_schedule_with_warmup,
// get_cosine_with_min_lr_schedule_with_warmup).
enum class LrSchedule { kConstant, kLinear, kCosine };
// "constant" | "linear" | "cosine"; throws loom::Error naming `flag` and the valid names.
LrSchedule ParseLrSchedule(const std::string& name, const std::string& flag = "--lr-schedule");
const char* LrScheduleName(LrSchedule schedule);

struct TrainingOptions {
  double lr = 1e-3;  // the peak learning rate
  LrSchedule schedule = LrSchedule::kConstant;
  int warmup_steps = 0;
  // Steps the schedule spans (warmup included); 0: the run's --steps. A
  // resumed run keeps the schedule of the run it continues when this is set.
  int decay_steps = 0;
  double min_lr_ratio = 0;  // where linear and cosine end, as a fraction of lr
  // AdamW's decoupled weight decay (torch.optim.AdamW's default 0.01), on
  // tensors of two or more dimensions only: matrices and embeddings, never
  // norms' scales or biases (Megatron-LM's rule; for Llama-family models the
  // same tensors as transformers' Trainer.get_decay_parameter_names).
  double weight_decay = 0.01;
  // Gradients scaled so that their global L2 norm is at most this
  // (torch.nn.utils.clip_grad_norm_; Megatron's and transformers' default 1);
  // 0: not clipped (the norm is still computed and reported).
  double clip_grad = 1.0;
  // A step whose loss or gradient norm is not finite is skipped (its
  // gradients dropped, counted and reported) instead of stopping the run.
  bool skip_nonfinite = false;

  // Throws loom::Error naming the flag of a value no run can use.
  void Validate(int steps) const;
  // The learning rate step `step` (0-based) of a run of `steps` steps trains with.
  double LearningRateAt(int step, int steps) const;
};

}  // namespace loom::runtime
