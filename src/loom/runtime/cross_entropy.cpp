#include "loom/runtime/cross_entropy.h"

#include <fmt/format.h>

#include <algorithm>

#include "loom/cost/layer_work.h"
#include "loom/error.h"
#include "loom/runtime/autograd_pointers.h"

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

struct VocabParallelCrossEntropyFn : torch::autograd::Function<VocabParallelCrossEntropyFn> {
  // `group`: the caller's all-reduce (the autograd context keeps only ints).
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& logits,
                               const torch::Tensor& targets, int64_t begin, int64_t rank, int64_t ranks, int64_t group,
                               int64_t chunk) {
    const auto& all_reduce = *FromInt<const std::function<void(torch::Tensor&)>>(group);
    const int64_t rows = logits.size(0), width = logits.size(1);
    // Rows 0..ranks-1: each rank's log-sum-exp of its entries; row `ranks`:
    // the target's logit, on the rank holding it (0 elsewhere and unscored).
    torch::Tensor parts = torch::zeros({ranks + 1, rows}, logits.options().dtype(torch::kFloat));
    const torch::Tensor local = targets - begin;
    const torch::Tensor mine = (targets != kIgnored) & (local >= 0) & (local < width);
    for (int64_t r = 0; r < rows; r += chunk) {
      const int64_t n = std::min(chunk, rows - r);
      const torch::Tensor x = logits.slice(0, r, r + n);
      parts[rank].slice(0, r, r + n).copy_(torch::logsumexp(x.to(torch::kFloat), {1}));
      const torch::Tensor picked =
          x.gather(1, local.slice(0, r, r + n).clamp(0, std::max<int64_t>(width - 1, 0)).unsqueeze(1)).squeeze(1);
      parts[ranks].slice(0, r, r + n).copy_(torch::where(mine.slice(0, r, r + n), picked.to(torch::kFloat), 0.0));
    }
    if (rows > 0) all_reduce(parts);  // every rank of the group has the same rows
    const torch::Tensor lse = torch::logsumexp(parts.slice(0, 0, ranks), {0});  // [rows], the whole vocabulary's
    const torch::Tensor scored = targets != kIgnored;
    ctx->save_for_backward({logits, targets, lse});
    ctx->saved_data["begin"] = begin;
    ctx->saved_data["chunk"] = chunk;
    return torch::where(scored, lse - parts[ranks], 0.0).sum();
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &logits = saved[0], &targets = saved[1], &lse = saved[2];
    const int64_t rows = logits.size(0), width = logits.size(1), chunk = ctx->saved_data["chunk"].toInt();
    const torch::Tensor local = targets - ctx->saved_data["begin"].toInt();
    const torch::Tensor g = grad_outputs[0].to(torch::kFloat);
    torch::Tensor grad = torch::empty_like(logits, torch::MemoryFormat::Contiguous);
    for (int64_t r = 0; r < rows; r += chunk) {
      const int64_t n = std::min(chunk, rows - r);
      const torch::Tensor t = local.slice(0, r, r + n);
      const torch::Tensor scored = targets.slice(0, r, r + n) != kIgnored;
      // d(lse - x_t)/dx = exp(x - lse) - onehot(t): this rank's entries of the
      // whole vocabulary's softmax, minus 1 where it holds the target.
      const torch::Tensor row_scale = scored.to(torch::kFloat) * g;  // [n]
      torch::Tensor p = logits.slice(0, r, r + n).to(torch::kFloat) - lse.slice(0, r, r + n).unsqueeze(1);
      p.exp_().mul_(row_scale.unsqueeze(1));
      const torch::Tensor held = (t >= 0) & (t < width);
      p.scatter_add_(1, t.clamp(0, std::max<int64_t>(width - 1, 0)).unsqueeze(1),
                     -(row_scale * held.to(torch::kFloat)).unsqueeze(1));
      grad.slice(0, r, r + n).copy_(p);
    }
    return {grad, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// Refuses logits and targets that do not pair up: gather would score a
// shorter target list's rows only, in silence.
void CheckLossShapes(const torch::Tensor& logits, const torch::Tensor& targets) {
  if (logits.dim() != 2 || targets.dim() != 1 || targets.size(0) != logits.size(0) ||
      targets.scalar_type() != torch::kLong) {
    throw Error(fmt::format(
        "runtime: the loss takes logits [rows, vocab] and int64 targets [rows]; got {} logits "
        "and {} targets",
        logits.dim() == 2 ? fmt::format("{}x{}", logits.size(0), logits.size(1)) : fmt::format("{}-d", logits.dim()),
        targets.dim() == 1 ? fmt::format("{}", targets.size(0)) : fmt::format("{}-d", targets.dim())));
  }
}

}  // namespace

torch::Tensor SummedCrossEntropy(const torch::Tensor& logits, const torch::Tensor& targets, int64_t chunk_rows) {
  CheckLossShapes(logits, targets);
  return SummedCrossEntropyFn::apply(logits, targets, chunk_rows > 0 ? chunk_rows : LossChunkRows(logits.size(1)));
}

torch::Tensor VocabParallelCrossEntropy(const torch::Tensor& logits, const torch::Tensor& targets, int64_t begin,
                                        int rank, int ranks, const std::function<void(torch::Tensor&)>& all_reduce,
                                        int64_t chunk_rows) {
  CheckLossShapes(logits, targets);
  if (ranks < 1 || rank < 0 || rank >= ranks || chunk_rows < 1) {
    throw std::logic_error("VocabParallelCrossEntropy: rank, ranks or chunk_rows out of range");
  }
  return VocabParallelCrossEntropyFn::apply(logits, targets, begin, rank, ranks, AsInt(&all_reduce), chunk_rows);
}

}  // namespace loom::runtime
