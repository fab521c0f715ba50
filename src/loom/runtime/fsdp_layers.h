// ZeRO-3 one layer at a time, as PyTorch's FSDP runs it with each layer its
// own unit: a layer's full weights are gathered just before its forward and
// released right after it, gathered again when its output's gradient arrives
// and released once its backward is done, when its gradients are
// reduce-scattered into this replica's slice and dropped. So a stage holds
// its slices plus about two layers' full weights and gradients, as the
// simulator prices ZeRO-3 (cost/layer_pricing.cpp: a gather per layer before
// the forward and the backward, a reduce-scatter per microbatch; model state
// sharded by cost/memory.h). Gathering the whole stage for each action, as
// the runtime did before, held the whole stage's weights and gradients on
// top (the demo's FSDP plan: 1.5-1.6x the predicted peak).
//
// Every collective is matched by order over the stage's data-parallel group,
// while which layers run depends on the microbatch: the forward's hooks come
// for every layer in stack order (LayerHooks), and the backward processes
// layers strictly from the top down, catching up the layers autograd does not
// reach (a module without tokens in this microbatch, frozen layers below)
// before the one it does, and the rest at the action's end. Autograd's engine
// takes the ready node created last first (torch/csrc/autograd/engine.cpp,
// CompareNodeTaskTime: higher sequence_nr first), and the stack's layers are
// made in stack order, so the backward reaches them from the top down in a
// stack of towers side by side too (they gathered the whole stage for each
// backward before, holding its weights and gradients unpriced: tiny-omni's
// ZeRO-3 stage of four towers measured 1.19-1.38x the prediction); a
// backward that does not is a named error, not a silent mismatch. An
// embedding matrix that a tied head of the same stack reads stays gathered
// through each forward and backward action. Under zero-bubble's split
// backward the deferred weight gradients come in the W action:
// reduce-scattered at its end, every layer from the top down.
//
// Not thread-safe; one per ZeRO-3 stage of a process, set as its stack's
// hooks. Runtime translation units only.
#pragma once

#include "loom/runtime/torch_model.h"
#include "loom/runtime/zero_shards.h"

namespace loom::runtime {

class FsdpLayers : public LayerHooks {
 public:
  // `stack` is stage v's, whose gradient bucket i is its layer i's trainable
  // parameters (ZeroShards over per-layer buckets).
  FsdpLayers(ZeroShards& zero, int v, LayerStack stack);

  void BeforeForward(int layer) override;
  void AfterForward(int layer) override;
  // Throws loom::Error where the backward reaches a layer below one it has
  // already passed (an order the other replicas may not share).
  void BeforeBackward(int layer) override;

  // After a forward action.
  void FinishForward();
  // Around a backward action (kBackward, kBackwardData).
  void StartBackward();
  void FinishBackward();
  // After a W action: its weight gradients reduce-scattered, top layer first.
  void ReduceWeightGradients();

 private:
  // Layer l's turn in the backward: the previous layer's gradients
  // reduce-scattered and its weights released, then l's gathered.
  void Reach(int layer);

  ZeroShards& zero_;
  const int stage_;
  LayerStack stack_;
  std::vector<std::vector<torch::Tensor>> params_;  // per layer
  int next_ = -1;                                   // the highest layer the backward has not reached yet
  int gathered_ = -1;                               // the layer whose weights the backward holds, or -1
  // An embedding layer a tied head of the stack reads too (TiedWithin): kept
  // gathered from its forward to the forward action's end, and through the
  // whole backward.
  const int pinned_;
  bool pinned_held_ = false;
};

}  // namespace loom::runtime
