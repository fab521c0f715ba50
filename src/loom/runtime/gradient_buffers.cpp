#include "loom/runtime/gradient_buffers.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include "loom/error.h"

namespace loom::runtime {

GradientBuffers::Bucket& GradientBuffers::Buffer(int v, int b) {
  auto it = buckets_of_.find({v, b});
  if (it != buckets_of_.end() && it->second.flat.defined()) return it->second;
  const auto& bucket = buckets_.at(v).at(b);
  int64_t numel = 0;
  for (const auto& p : bucket) {
    // One buffer holds one dtype on one device: the fp32 master weights'
    // gradients (bf16 runs compute in copies, compute_copies.h ComputeCopies).
    if (p.scalar_type() != bucket[0].scalar_type() || p.device() != bucket[0].device()) {
      throw Error(fmt::format("runtime: gradient bucket {} of stage {} mixes {} on {} with {} on {}", b, v,
                              c10::toString(bucket[0].scalar_type()), bucket[0].device().str(),
                              c10::toString(p.scalar_type()), p.device().str()));
    }
    numel += p.numel();
  }
  const auto options = bucket.empty() ? torch::TensorOptions() : bucket[0].options();
  const auto multiple = multiple_of_.find(v);
  const int64_t m = multiple == multiple_of_.end() ? 1 : std::max<int64_t>(1, multiple->second);
  torch::Tensor flat = torch::zeros({(numel + m - 1) / m * m}, options.requires_grad(false));
  if (it != buckets_of_.end()) {  // made again after Release
    it->second.flat = std::move(flat);
    return it->second;
  }
  Bucket made;
  made.flat = std::move(flat);
  made.reached = std::make_shared<std::vector<char>>(bucket.size(), 0);
  for (size_t i = 0; i < bucket.size(); ++i) {
    torch::Tensor p = bucket[i];
    // Held by the hook itself: the parameters may outlive this object.
    p.register_hook([reached = made.reached, i](const torch::Tensor& g) {
      if (g.defined()) (*reached)[i] = 1;  // (a zero-bubble B pass hands none: its W pass says so)
    });
    reached_of_[p.unsafeGetTensorImpl()] = {made.reached.get(), i};
  }
  return buckets_of_.emplace(std::make_pair(v, b), std::move(made)).first->second;
}

void GradientBuffers::Bind(int v) {
  torch::NoGradGuard no_grad;
  const auto& buckets = buckets_.at(v);
  for (int b = 0; b < static_cast<int>(buckets.size()); ++b) {
    if (buckets[b].empty()) continue;
    Bucket& made = Buffer(v, b);
    made.flat.zero_();
    std::fill(made.reached->begin(), made.reached->end(), 0);
    const auto views = SplitLike(made.flat, buckets[b]);
    for (size_t i = 0; i < views.size(); ++i) {
      torch::Tensor p = buckets[b][i];
      p.mutable_grad() = views[i];
    }
  }
}

torch::Tensor GradientBuffers::Flat(int v, int b) {
  torch::NoGradGuard no_grad;
  const auto& bucket = buckets_.at(v).at(b);
  int64_t numel = 0;
  for (const auto& p : bucket) numel += p.numel();
  const torch::Tensor flat = Buffer(v, b).flat.narrow(0, 0, numel);
  const auto views = SplitLike(flat, bucket);
  for (size_t i = 0; i < views.size(); ++i) {
    torch::Tensor p = bucket[i];
    const torch::Tensor& g = p.grad();
    if (g.defined() && g.data_ptr() == views[i].data_ptr()) continue;
    if (g.defined()) {
      views[i].copy_(g);
    } else {
      views[i].zero_();
    }
    p.mutable_grad() = views[i];
  }
  return flat;
}

torch::Tensor GradientBuffers::Scratch(int v, int b) const {
  auto it = buckets_of_.find({v, b});
  return it == buckets_of_.end() ? torch::Tensor() : it->second.flat;
}

bool GradientBuffers::Bound(int v) const {
  const auto& buckets = buckets_.at(v);
  for (int b = 0; b < static_cast<int>(buckets.size()); ++b) {
    if (buckets[b].empty()) continue;
    auto it = buckets_of_.find({v, b});
    if (it == buckets_of_.end() || !it->second.flat.defined()) return false;
  }
  return true;
}

torch::Tensor GradientBuffers::Release(int v, int b) {
  auto it = buckets_of_.find({v, b});
  if (it == buckets_of_.end()) return torch::Tensor();
  for (const auto& p : buckets_.at(v).at(b)) {
    torch::Tensor param = p;
    param.mutable_grad() = torch::Tensor();
  }
  return std::exchange(it->second.flat, torch::Tensor());
}

void GradientBuffers::DropUnreached(int v) {
  const auto& buckets = buckets_.at(v);
  for (int b = 0; b < static_cast<int>(buckets.size()); ++b) {
    auto it = buckets_of_.find({v, b});
    if (it == buckets_of_.end()) continue;
    for (size_t i = 0; i < buckets[b].size(); ++i) {
      torch::Tensor p = buckets[b][i];
      if (!(*it->second.reached)[i]) p.mutable_grad() = torch::Tensor();
    }
  }
}

void GradientBuffers::MarkReached(const torch::Tensor& weight) {
  auto it = reached_of_.find(weight.unsafeGetTensorImpl());
  if (it != reached_of_.end()) (*it->second.first)[it->second.second] = 1;
}

}  // namespace loom::runtime
