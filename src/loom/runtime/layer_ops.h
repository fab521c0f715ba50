// The elementwise parts of a transformer layer as autograd functions that keep
// for the backward only what the simulator's memory model prices
// (cost/layer_work.h ActivationBytes), the way fused kernels do (Megatron's
// fused RMSNorm and bias-SwiGLU): composed of plain torch ops, autograd would
// also keep each intermediate (RMSNorm's normalised copy, the gate's
// activation), 1.2x to 1.8x a layer's priced bytes
// (ActivationMemory.EveryTransformerLayerKeepsWhatTheMemoryModelPrices).
// Values equal transformers' modules: LlamaRMSNorm, ACT2FN and LlamaMLP's
// act_fn(gate_proj(x)) * up_proj(x). Torch types: runtime .cpp files and tests only.
#pragma once

#include <torch/torch.h>

#include "loom/spec/layer.h"

namespace loom::runtime {

// transformers' ACT2FN `silu`, `gelu` (exact), `gelu_pytorch_tanh` and
// `quick_gelu` (x sigmoid(1.702 x)); kDefault: SiLU in a gated MLP, else GELU.
torch::Tensor Activate(Activation activation, bool gated, const torch::Tensor& x);

// LlamaRMSNorm: x in float32 times rsqrt(mean(x^2) + eps), cast back to x's
// type, times `weight`. Keeps x and the per-row rsqrt (one float per row).
torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

// A plain MLP's act(x) (`gated` false) or a gated MLP's act(gate) * up, as
// one function: keeps x (gate and up) only, and the backward recomputes the
// activation (quick_gelu composed of torch ops would also keep its sigmoid).
torch::Tensor MlpActivation(Activation activation, const torch::Tensor& x);
torch::Tensor MlpActivation(Activation activation, const torch::Tensor& gate, const torch::Tensor& up);

}  // namespace loom::runtime
