#include "loom/runtime/compute_copies.h"

namespace loom::runtime {

namespace {

// A held weight as p's compute copy: the forward hands the held tensor on
// (never reading p, whose fp32 storage is released), the backward casts the
// gradient to p's type, as the cast `p.to(dtype)` would.
struct HeldWeight : torch::autograd::Function<HeldWeight> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& p,
                               const torch::Tensor& held) {
    ctx->saved_data["type"] = static_cast<int64_t>(p.scalar_type());
    // Zero-bubble's B pass hands no weight gradient: passed on as none, as the
    // cast's own node does, not as a weight-sized zero tensor made and added.
    ctx->set_materialize_grads(false);
    return held.detach();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto type = static_cast<torch::ScalarType>(ctx->saved_data["type"].toInt());
    return {grads[0].defined() ? grads[0].to(type) : torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor ComputeCopies::Of(const torch::Tensor& p) {
  if (!p.defined() || p.scalar_type() == dtype) return p;
  const auto held_weight = held.find(p.unsafeGetTensorImpl());
  if (!torch::GradMode::is_enabled()) return held_weight != held.end() ? held_weight->second : p.to(dtype);
  auto [it, made] = copies.try_emplace(p.unsafeGetTensorImpl());
  if (made) it->second = held_weight != held.end() ? HeldWeight::apply(p, held_weight->second) : p.to(dtype);
  return it->second;
}

torch::Tensor ComputeCopies::ForBackward(const torch::Tensor& p, torch::ScalarType type) const {
  if (p.scalar_type() == type) return p;
  const auto held_weight = held.find(p.unsafeGetTensorImpl());
  if (held_weight != held.end()) {
    // p's own storage is released: only the held weight has its values.
    TORCH_CHECK(type == dtype, "ComputeCopies::ForBackward: a held weight asked for in another dtype");
    return held_weight->second;
  }
  if (type == dtype) {
    if (const auto it = copies.find(p.unsafeGetTensorImpl()); it != copies.end()) return it->second.detach();
  }
  return p.to(type);
}

}  // namespace loom::runtime
