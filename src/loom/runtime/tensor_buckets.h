// Flat buffers of several tensors: what a message carries between stages, and
// a gradient bucket as its data-parallel all-reduce or ZeRO's shards see it.
// Only runtime translation units include this header (it includes libtorch).
#pragma once

#include <torch/torch.h>

#include <map>
#include <vector>

namespace loom::runtime {

// One flat buffer of the tensors' values. No tensors: an empty buffer on
// `device` (a chain edge between stages of which the later reads nothing of
// the earlier, such as two towers no module joins).
torch::Tensor Flatten(const std::vector<torch::Tensor>& parts, const torch::Device& device = torch::kCPU);

// `flat` cut into views shaped like `like`.
std::vector<torch::Tensor> SplitLike(const torch::Tensor& flat, const std::vector<torch::Tensor>& like);

// A stage's trainable parameters cut into `count` buckets of about equal
// size, last parameters first (their gradients are ready first in the backward).
std::vector<std::vector<torch::Tensor>> Buckets(const std::vector<torch::Tensor>& params, int count);

// Per stage of a process, its gradient buckets (frozen layers are in none).
using StageBuckets = std::map<int, std::vector<std::vector<torch::Tensor>>>;

}  // namespace loom::runtime
