#include "loom/runtime/fsdp_layers.h"

#include <fmt/format.h>

#include "loom/error.h"

namespace loom::runtime {

FsdpLayers::FsdpLayers(ZeroShards& zero, int v, LayerStack stack)
    : zero_(zero),
      stage_(v),
      stack_(std::move(stack)),
      params_(stack_->LayerTrainableParameters()),
      pinned_(stack_->TiedWithin()) {}

void FsdpLayers::BeforeForward(int layer) {
  if (layer == pinned_ && pinned_held_) return;
  zero_.GatherBucket(stage_, layer);
  if (layer == pinned_) pinned_held_ = true;
}

void FsdpLayers::AfterForward(int layer) {
  if (layer == pinned_) return;  // the tied head reads it later in this forward
  zero_.ReleaseBucket(stage_, layer);
  stack_->DropComputeCopies(params_.at(layer));
}

void FsdpLayers::FinishForward() {
  if (!pinned_held_) return;
  zero_.ReleaseBucket(stage_, pinned_);
  stack_->DropComputeCopies(params_.at(pinned_));
  pinned_held_ = false;
}

void FsdpLayers::StartBackward() {
  next_ = stack_->num_layers() - 1;
  gathered_ = -1;
  if (pinned_ >= 0) {  // both the head's backward and its own read it
    zero_.GatherBucket(stage_, pinned_);
    pinned_held_ = true;
  }
}

void FsdpLayers::BeforeBackward(int layer) {
  if (layer > next_) {
    throw Error(
        fmt::format("runtime: ZeRO-3 stage {}: the backward reached layer {} after layer {}; its per-layer gathers and "
                    "reduce-scatters assume the stack's layers from the top down",
                    stage_, layer, next_ + 1));
  }
  while (next_ >= layer) Reach(next_--);
}

void FsdpLayers::Reach(int layer) {
  // Frozen: no shard, nothing to gather or reduce. Pinned: gathered throughout.
  if (params_.at(layer).empty() || layer == pinned_) return;
  if (gathered_ >= 0) {  // its weights go before its gradients are reduced
    zero_.ReleaseBucket(stage_, gathered_);
    zero_.ReduceScatterGradients(stage_, gathered_);
  }
  zero_.GatherBucket(stage_, layer);
  gathered_ = layer;
}

void FsdpLayers::FinishBackward() {
  while (next_ >= 0) Reach(next_--);
  if (gathered_ >= 0) {
    zero_.ReleaseBucket(stage_, gathered_);
    zero_.ReduceScatterGradients(stage_, gathered_);
    gathered_ = -1;
  }
  if (pinned_held_) {
    zero_.ReleaseBucket(stage_, pinned_);
    zero_.ReduceScatterGradients(stage_, pinned_);
    pinned_held_ = false;
  }
  stack_->ClearComputeCopies();
}

void FsdpLayers::ReduceWeightGradients() {
  for (int l = stack_->num_layers() - 1; l >= 0; --l) {
    if (!params_.at(l).empty()) zero_.ReduceScatterGradients(stage_, l);
  }
}

}  // namespace loom::runtime
