// Contiguous gradient buffers: each bucket a stage all-reduces over its
// data-parallel group is one flat tensor, and every parameter's .grad a view
// of its slice. The backward accumulates into the views and the all-reduce
// sums the buffer in place, as Megatron-LM's contiguous grad buffer
// (megatron/core/distributed/param_and_grad_buffer.py) and DDP's
// gradient_as_bucket_view do. Before, each bucket was copied out for its
// all-reduce and the sum copied back: a second copy of a bucket's gradients
// in flight until its wait, which the memory model (cost/memory.h: one fp32
// gradient per trainable parameter, held the whole step) does not count and
// Megatron does not make (PP 2 x DP 2 measured 1.11-1.15x the predicted peak);
// and a stage's gradients came into being during its backward, so that its
// forward held none of what the model counts (single-stage TP 2 measured
// 0.86-0.93x).
// Only runtime translation units include this header (it includes libtorch).
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "loom/runtime/tensor_buckets.h"

namespace loom::runtime {

class GradientBuffers {
 public:
  // `buckets`: the process's gradient buckets (outlives this object).
  // `multiple_of`: per stage, a multiple each of its buffers' lengths is
  // rounded up to (ZeRO-1's members: Scratch holds the gather), else 1.
  explicit GradientBuffers(const StageBuckets& buckets, std::map<int, int64_t> multiple_of = {})
      : buckets_(buckets), multiple_of_(std::move(multiple_of)) {}

  // Zeroes stage v's buffers and points each of its parameters' .grad at its
  // view, so that the step's backwards accumulate in place (autograd adds
  // into a defined gradient: AccumulateGrad). The buffers are made at the
  // first call, inside the step whose tensors the worker counts
  // (tensor_memory.h), and kept for the run (the model's gradient is held
  // the whole step, the forward's included) unless released.
  void Bind(int v);

  // Bucket b of stage v as its flat buffer, every parameter's gradient in
  // it: one that is not its view (replaced since Bind, or dropped: zero) is
  // copied in and re-pointed. All-reduced in place, it leaves the sum in the
  // parameters' gradients (a parameter no backward reached takes part with
  // zeros, as DDP's and Megatron's buckets do).
  torch::Tensor Flat(int v, int b);

  // Bucket b of stage v's whole buffer (padded: see multiple_of), undefined
  // where it has none; its gradients' views read what is written to it.
  torch::Tensor Scratch(int v, int b) const;

  // Whether all of stage v's buffers exist (made by Bind, none released since).
  bool Bound(int v) const;
  // Lets bucket b of stage v's buffer go (ZeRO-2, once it kept its slice of
  // the sum), the parameters' gradients dropped, and returns it (the caller's
  // reference frees it); the next Bind makes it again.
  torch::Tensor Release(int v, int b);

  // Drops the gradient of each parameter of stage v that no backward reached
  // since Bind: torch.optim.AdamW skips a parameter without one (no decay,
  // no moment update), as the stage did before its gradients had a buffer.
  // For stages no all-reduce sums (Flat gives the others zeros).
  void DropUnreached(int v);
  // `weight`'s gradient was added to outside autograd (zero-bubble's W
  // pass, torch_model.h ApplyWeightGradients), where no hook sees it.
  void MarkReached(const torch::Tensor& weight);

 private:
  struct Bucket {
    torch::Tensor flat;  // the gradients, then padding (undefined once released)
    // Per parameter: a backward reached it since Bind (set by a hook on
    // the parameter, which runs before autograd accumulates its gradient).
    std::shared_ptr<std::vector<char>> reached;
  };
  Bucket& Buffer(int v, int b);

  const StageBuckets& buckets_;
  const std::map<int, int64_t> multiple_of_;
  std::map<std::pair<int, int>, Bucket> buckets_of_;                         // (stage, bucket)
  std::map<const void*, std::pair<std::vector<char>*, size_t>> reached_of_;  // a parameter's flag
};

}  // namespace loom::runtime
