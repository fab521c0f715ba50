#include "loom/runtime/rotary.h"

#include <cmath>
#include <numbers>

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

torch::Tensor ApplyRope(const torch::Tensor& x, const RopeTables& tables) {
  const int64_t half = x.size(-1) / 2;
  const torch::Tensor rotated = torch::cat({-x.slice(-1, half), x.slice(-1, 0, half)}, -1);
  const torch::Tensor cos = tables.cos.unsqueeze(1).unsqueeze(0);  // [1, rows, 1, d]
  const torch::Tensor sin = tables.sin.unsqueeze(1).unsqueeze(0);
  return x * cos + rotated * sin;
}

}  // namespace loom::runtime
