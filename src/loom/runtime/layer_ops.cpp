#include "loom/runtime/layer_ops.h"

#include "loom/runtime/fused_elementwise.h"

namespace loom::runtime {

namespace {

// ATen's fused RMSNorm has a CUDA kernel (its CPU form is the composition
// below, through autograd) and takes a weight of the input's type.
bool UsesFusedKernel(const torch::Tensor& x, const torch::Tensor& weight) {
  return x.is_cuda() && weight.scalar_type() == x.scalar_type() && x.is_contiguous();
}

struct RmsNormFunction : torch::autograd::Function<RmsNormFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x, torch::Tensor weight,
                               double eps) {
    // On a GPU, ATen's fused kernel (`_fused_rms_norm`, what torch.nn.functional.rms_norm
    // runs there): one pass over x forward, one backward, where the composed
    // form below runs ~5 elementwise kernels forward and ~10 backward, each
    // through fp32 copies of x (~18 B per value against ~4 B in bf16). It
    // multiplies by the weight before rounding to x's type, transformers after:
    // equal in fp32, one rounding apart in bf16.
    ctx->saved_data["fused"] = UsesFusedKernel(x, weight);
    if (ctx->saved_data["fused"].toBool()) {
      auto [y, rstd] = at::_fused_rms_norm(x, {x.size(-1)}, weight, eps);
      ctx->save_for_backward({x, weight, rstd});
      return y;
    }
    const torch::Tensor h = x.to(torch::kFloat);
    const torch::Tensor rstd = torch::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps);
    ctx->save_for_backward({x, weight, rstd});
    return weight * (h * rstd).to(x.scalar_type());
  }
  // n = x rstd; dx = rstd (dn - n mean(dn n)) per row, the derivative of x / sqrt(mean(x^2) + eps).
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &weight = saved[1], &rstd = saved[2], &g = grads[0];
    if (ctx->saved_data["fused"].toBool()) {
      auto [grad_x, grad_w] = at::_fused_rms_norm_backward(g.contiguous(), x, {x.size(-1)}, rstd, weight,
                                                           {ctx->needs_input_grad(0), ctx->needs_input_grad(1)});
      return {grad_x, grad_w, torch::Tensor()};
    }
    const torch::Tensor n = x.to(torch::kFloat) * rstd;
    torch::Tensor grad_x, grad_w;
    if (ctx->needs_input_grad(1)) {
      grad_w = (g * n.to(x.scalar_type())).reshape({-1, n.size(-1)}).sum(0).to(weight.scalar_type());
    }
    if (ctx->needs_input_grad(0)) {
      const torch::Tensor dn = (g * weight).to(torch::kFloat);
      grad_x = (rstd * (dn - n * (dn * n).mean(-1, /*keepdim=*/true))).to(x.scalar_type());
    }
    return {grad_x, grad_w, torch::Tensor()};
  }
};

// act(x), or act(gate) * up where `gated` (a plain MLP passes x again as
// `up`: autograd functions take no undefined tensors; it gets no gradient).
struct MlpActivationFunction : torch::autograd::Function<MlpActivationFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x, torch::Tensor up,
                               int64_t activation, bool gated) {
    ctx->save_for_backward(gated ? std::vector<torch::Tensor>{x, up} : std::vector<torch::Tensor>{x});
    ctx->saved_data["activation"] = activation;
    // SwiGLU on a GPU: one kernel each way (fused_elementwise.h), equal to the composed form.
    const auto kind = static_cast<Activation>(activation);
    const bool silu = kind == Activation::kSilu || (kind == Activation::kDefault && gated);
    ctx->saved_data["fused"] = gated && silu && FusedSwigluRuns(x, up);
    if (ctx->saved_data["fused"].toBool()) return FusedSwiglu(x, up);
    torch::NoGradGuard no_grad;
    const torch::Tensor act = Activate(static_cast<Activation>(activation), gated, x);
    return gated ? act * up : act;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& g = grads[0];
    const bool gated = saved.size() == 2;
    if (ctx->saved_data["fused"].toBool()) {
      auto [grad_gate, grad_up] = FusedSwigluBackward(g, saved[0], saved[1]);
      return {ctx->needs_input_grad(0) ? grad_gate : torch::Tensor(),
              ctx->needs_input_grad(1) ? grad_up : torch::Tensor(), torch::Tensor(), torch::Tensor()};
    }
    const torch::Tensor x = saved[0].detach().requires_grad_(true);
    torch::Tensor act;
    {
      torch::AutoGradMode enable(true);
      act = Activate(static_cast<Activation>(ctx->saved_data["activation"].toInt()), gated, x);
    }
    const torch::Tensor grad_up = gated && ctx->needs_input_grad(1) ? g * act.detach() : torch::Tensor();
    torch::Tensor grad_x;
    if (ctx->needs_input_grad(0)) grad_x = torch::autograd::grad({act}, {x}, {gated ? g * saved[1] : g})[0];
    return {grad_x, grad_up, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor Activate(Activation activation, bool gated, const torch::Tensor& x) {
  switch (activation) {
    case Activation::kDefault:
      return gated ? torch::silu(x) : torch::gelu(x);
    case Activation::kSilu:
      return torch::silu(x);
    case Activation::kGelu:
      return torch::gelu(x);
    case Activation::kGeluTanh:
      return torch::gelu(x, "tanh");
    case Activation::kQuickGelu:
      return x * torch::sigmoid(1.702 * x);
  }
  return x;
}

torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  return RmsNormFunction::apply(x, weight, eps);
}

torch::Tensor MlpActivation(Activation activation, const torch::Tensor& x) {
  return MlpActivationFunction::apply(x, x, static_cast<int64_t>(activation), false);
}

torch::Tensor MlpActivation(Activation activation, const torch::Tensor& gate, const torch::Tensor& up) {
  return MlpActivationFunction::apply(gate, up, static_cast<int64_t>(activation), true);
}

}  // namespace loom::runtime
