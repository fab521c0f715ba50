#include "loom/runtime/cross_entropy.h"

#include <fmt/format.h>

#include <algorithm>

#include "loom/cost/layer_work.h"
#include "loom/error.h"

namespace loom::runtime {

namespace {

constexpr int64_t kIgnored = -100;  // transformers' ignore_index

struct SummedCrossEntropyFn : torch::autograd::Function<SummedCrossEntropyFn> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& logits,
                               const torch::Tensor& targets, int64_t chunk) {
    const int64_t rows = logits.size(0);
    torch::Tensor sum = torch::zeros({}, logits.options().dtype(torch::kFloat));
    for (int64_t r = 0; r < rows; r += chunk) {
      const int64_t n = std::min(chunk, rows - r);
      const torch::Tensor t = targets.slice(0, r, r + n);
      const torch::Tensor scored = t != kIgnored;
      // log_softmax casts to fp32 inside (its dtype): one fp32 chunk at a time.
      const torch::Tensor log_probs = torch::log_softmax(logits.slice(0, r, r + n), -1, torch::kFloat);
      const torch::Tensor picked = log_probs.gather(1, t.clamp_min(0).unsqueeze(1)).squeeze(1);
      sum -= torch::where(scored, picked, torch::zeros_like(picked)).sum();
    }
    ctx->save_for_backward({logits, targets});
    ctx->saved_data["chunk"] = chunk;
    return sum;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &logits = saved[0], &targets = saved[1];
    const int64_t rows = logits.size(0), chunk = ctx->saved_data["chunk"].toInt();
    const torch::Tensor g = grad_outputs[0].to(torch::kFloat);
    torch::Tensor grad = torch::empty_like(logits, torch::MemoryFormat::Contiguous);
    for (int64_t r = 0; r < rows; r += chunk) {
      const int64_t n = std::min(chunk, rows - r);
      const torch::Tensor t = targets.slice(0, r, r + n);
      // d(-log p_t)/dx = softmax(x) - onehot(t), times the output's gradient;
      // rows not scored get none.
      const torch::Tensor row_scale = (t != kIgnored).to(torch::kFloat) * g;  // [n]
      torch::Tensor p = torch::softmax(logits.slice(0, r, r + n), -1, torch::kFloat);
      p.mul_(row_scale.unsqueeze(1));
      p.scatter_add_(1, t.clamp_min(0).unsqueeze(1), -row_scale.unsqueeze(1));
      grad.slice(0, r, r + n).copy_(p);
    }
    return {grad, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor SummedCrossEntropy(const torch::Tensor& logits, const torch::Tensor& targets, int64_t chunk_rows) {
  // gather would score a shorter target list's rows only, in silence.
  if (logits.dim() != 2 || targets.dim() != 1 || targets.size(0) != logits.size(0) ||
      targets.scalar_type() != torch::kLong) {
    throw Error(fmt::format(
        "runtime: the loss takes logits [rows, vocab] and int64 targets [rows]; got {} logits "
        "and {} targets",
        logits.dim() == 2 ? fmt::format("{}x{}", logits.size(0), logits.size(1)) : fmt::format("{}-d", logits.dim()),
        targets.dim() == 1 ? fmt::format("{}", targets.size(0)) : fmt::format("{}-d", targets.dim())));
  }
  return SummedCrossEntropyFn::apply(logits, targets, chunk_rows > 0 ? chunk_rows : LossChunkRows(logits.size(1)));
}

}  // namespace loom::runtime
