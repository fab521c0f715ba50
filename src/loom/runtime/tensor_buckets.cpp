#include "loom/runtime/tensor_buckets.h"

#include <algorithm>
#include <cstdint>

namespace loom::runtime {

torch::Tensor Flatten(const std::vector<torch::Tensor>& parts, const torch::Device& device) {
  if (parts.empty()) return torch::empty({0}, torch::TensorOptions().device(device));
  std::vector<torch::Tensor> flat;
  for (const auto& t : parts) flat.push_back(t.reshape({-1}));
  return torch::cat(flat);
}

std::vector<torch::Tensor> SplitLike(const torch::Tensor& flat, const std::vector<torch::Tensor>& like) {
  std::vector<torch::Tensor> out;
  int64_t off = 0;
  for (const auto& t : like) {
    out.push_back(flat.slice(0, off, off + t.numel()).view(t.sizes()));
    off += t.numel();
  }
  return out;
}

std::vector<std::vector<torch::Tensor>> Buckets(const std::vector<torch::Tensor>& params, int count) {
  int64_t total = 0;
  for (const auto& p : params) total += p.numel();
  std::vector<std::vector<torch::Tensor>> out(count);
  int64_t seen = 0;
  for (auto it = params.rbegin(); it != params.rend(); ++it) {
    const int b = static_cast<int>(std::min<int64_t>(count - 1, seen * count / std::max<int64_t>(1, total)));
    out[b].push_back(*it);
    seen += it->numel();
  }
  return out;
}

}  // namespace loom::runtime
