#include "loom/runtime/rotary.h"

#include <cmath>
#include <numbers>

#include "loom/runtime/fused_elementwise.h"

namespace loom::runtime {

torch::Tensor RopeInverseFrequencies(const Rope& rope, int64_t head_dim) {
  // transformers: 1 / base ** (arange(0, dim, 2, dtype=int64).float() / dim)
  const torch::Tensor exponents = torch::arange(0, head_dim, 2, torch::kLong).to(torch::kFloat) / head_dim;
  // Python's `scalar / tensor` is tensor.reciprocal() * scalar (two roundings)
  // while libtorch's is a division: written as Python computes it (for 1 / x
  // the two agree; below they differ in the last bit).
  torch::Tensor inv = torch::pow(rope.theta, exponents).reciprocal();
  if (rope.scaling != RopeScaling::kLlama3) return inv;
  // _compute_llama3_parameters, in its order of operations (all float32).
  const double old_context = static_cast<double>(rope.original_max_positions);
  const double low_freq_wavelen = old_context / rope.low_freq_factor;
  const double high_freq_wavelen = old_context / rope.high_freq_factor;
  const torch::Tensor wavelen = inv.reciprocal() * (2 * std::numbers::pi);
  torch::Tensor scaled = torch::where(wavelen > low_freq_wavelen, inv / rope.factor, inv);
  const torch::Tensor smooth =
      (wavelen.reciprocal() * old_context - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor);
  const torch::Tensor smoothed = (1 - smooth) * scaled / rope.factor + smooth * scaled;
  const torch::Tensor medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen);
  return torch::where(medium, smoothed, scaled);
}

RopeTables MakeRopeTables(const torch::Tensor& inverse_frequencies, const torch::Tensor& positions,
                          torch::ScalarType dtype) {
  const torch::Tensor inv = inverse_frequencies.to(positions.device());
  const torch::Tensor freqs = positions.to(torch::kFloat).unsqueeze(1) * inv.unsqueeze(0);  // [rows, d/2]
  const torch::Tensor emb = torch::cat({freqs, freqs}, 1);
  return {emb.cos().to(dtype), emb.sin().to(dtype)};
}

namespace {

// Rotary positions as one kernel each way on a GPU (fused_elementwise.h): the
// backward is the rotation's transpose, so it keeps only the tables, as the
// composed form's products do.
struct FusedRopeFunction : torch::autograd::Function<FusedRopeFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& cos,
                               const torch::Tensor& sin) {
    ctx->save_for_backward({cos, sin});
    return FusedRope(x, cos, sin, /*transpose=*/false);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    return {FusedRope(grads[0], saved[0], saved[1], /*transpose=*/true), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor ApplyRope(const torch::Tensor& x, const RopeTables& tables) {
  if (FusedRopeRuns(x, tables.cos, tables.sin)) return FusedRopeFunction::apply(x, tables.cos, tables.sin);
  const int64_t half = x.size(-1) / 2;
  const torch::Tensor rotated = torch::cat({-x.slice(-1, half), x.slice(-1, 0, half)}, -1);
  const torch::Tensor cos = tables.cos.unsqueeze(1).unsqueeze(0);  // [1, rows, 1, d]
  const torch::Tensor sin = tables.sin.unsqueeze(1).unsqueeze(0);
  return x * cos + rotated * sin;
}

}  // namespace loom::runtime
