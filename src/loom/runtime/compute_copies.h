// The weights a stage's layers compute with under mixed precision
// (docs/runtime.md "Precision"), as Megatron-LM runs it: parameters, and so
// gradients and AdamW's state, stay fp32 (the master weights); the layers
// compute in `dtype` (bf16) from a copy of each parameter made on its first
// use in a step, whose cast's backward carries the gradient to the fp32
// parameter (the copy's autograd node keeps no tensors, so every microbatch's
// backward passes through it). Copies are kept only while autograd records: a
// forward under no grad (full recomputation's first run) casts afresh. dtype
// kFloat: no copies, the parameters themselves.
//
// ZeRO-1/2 under mixed precision hold each parameter's weights in `dtype`
// for the whole run instead (`held`, zero_shards.h HoldFlatWeights): the fp32
// values live in the ZeRO slices only, as Megatron's distributed optimizer
// keeps 16-bit parameters beside fp32 main-weight shards. The held weight
// stands in for the copy; its autograd edge still leads to the fp32
// parameter, whose gradient is the one AdamW reads.
// Not thread-safe: one stage's copies, used by the thread that runs it (and
// its backward). Torch types: runtime .cpp files and tests only.
#pragma once

#include <torch/torch.h>

#include <unordered_map>

namespace loom::runtime {

struct ComputeCopies {
  torch::ScalarType dtype = torch::kFloat;
  // This step's copies, by parameter; dropped after every optimizer step.
  std::unordered_map<const c10::TensorImpl*, torch::Tensor> copies;
  // Weights held in dtype in place of a parameter's fp32 values, for the run.
  std::unordered_map<const c10::TensorImpl*, torch::Tensor> held;

  // `p` in dtype (p itself when it is in dtype already), recorded by autograd
  // as a cast of p.
  torch::Tensor Of(const torch::Tensor& p);
  // The weight a backward's matmul reads for parameter `p`, in `type`, outside
  // autograd: p itself, its held weight, this step's copy (no second cast of
  // the weights per backward), else a cast made now (ZeRO-3 drops its copies
  // between a layer's forward and backward).
  torch::Tensor ForBackward(const torch::Tensor& p, torch::ScalarType type) const;
  // `x` in dtype (activations entering a layer: data, positions, spliced inputs).
  torch::Tensor Cast(const torch::Tensor& x) const { return x.scalar_type() == dtype ? x : x.to(dtype); }
};

}  // namespace loom::runtime
