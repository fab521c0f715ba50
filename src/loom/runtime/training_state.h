// What a fault-tolerant run carries from one generation of its workers to the
// next (runtime/fault_tolerance.h): each trainable parameter's weights and
// AdamW state, by name ("{module}_{layer}.…", as LayerStack names them).
// Oobleck §2.5's premise: every pipeline holds whole layers with their
// optimizer state, so after a failure any surviving holder of a layer can
// hand it to the processes that hold it next (ExchangeState), and a run that
// cannot recover writes the same state as a training checkpoint's part
// (WriteStatePart) for a restart.
// Torch types: include from runtime .cpp files only.
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>
#include <utility>

#include "loom/runtime/c10d_calls.h"
#include "loom/runtime/fused_adamw.h"
#include "loom/spec/model.h"

namespace loom::runtime {

struct ParamState {
  torch::Tensor value, exp_avg, exp_avg_sq;  // moments undefined before the first step
  int64_t step = 0;                          // AdamW's step count for this parameter
};
using TrainingState = std::map<std::string, ParamState>;

// (module index, layer index) of a parameter name; throws loom::Error for a
// name LayerStack does not make.
std::pair<int, int> LayerOfParam(const Model& model, const std::string& name);

// A copy of `p` and its AdamW state (clones: later steps do not change it).
ParamState CaptureParam(const torch::Tensor& p, const FusedAdamW& optimizer);
// Sets `p` and its AdamW state to `s` (shapes must match; throws loom::Error naming `name`).
void RestoreParam(const std::string& name, torch::Tensor& p, FusedAdamW& optimizer, const ParamState& s);

// Collective over `world` (every member calls it with its own arguments):
// afterwards `state` holds every parameter of `needed` (name -> this
// process's tensor of that shape). Layer by layer in model order, a layer
// some member needs and does not hold whole is broadcast by the lowest-ranked
// member that holds it. Throws loom::Error naming a layer nobody holds.
// Returns the bytes this member received.
int64_t ExchangeState(GroupBase& world, const Model& model, TrainingState& state,
                      const std::map<std::string, torch::Tensor>& needed, AbortFlag abort);

// A training checkpoint's part (weights/run_checkpoint.h) holding `state`
// whole: what a fault-tolerant run's survivor writes when the run cannot
// recover. Survivors holding the same layer write the same tensors; the
// reader takes the first copy.
void WriteStatePart(const std::string& path, const TrainingState& state);

}  // namespace loom::runtime
