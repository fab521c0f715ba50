#include "loom/runtime/sequence_parallel.h"

#include <stdexcept>

#include "loom/runtime/autograd_pointers.h"
#include "loom/weights/checkpoint_parts.h"

namespace loom::runtime {

namespace {

weights::SliceSpan Span(int64_t total, int rank, const TensorParallel& tp) {
  return weights::SliceSpanOf(total, rank, tp.size);
}

int64_t ChunkRows(int64_t total, const TensorParallel& tp) { return (total + tp.size - 1) / tp.size; }

struct ScatterToSequenceParallelFn : torch::autograd::Function<ScatterToSequenceParallelFn> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& whole, int64_t tp) {
    ctx->saved_data["tp"] = tp;
    ctx->saved_data["total"] = whole.size(1);
    return LocalRows(whole, *FromInt<const TensorParallel>(tp)).clone();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list g) {
    const auto& tp = *FromInt<const TensorParallel>(ctx->saved_data["tp"].toInt());
    return {GatherRows(g[0], ctx->saved_data["total"].toInt(), tp), torch::Tensor()};
  }
};

struct GatherFromSequenceParallelFn : torch::autograd::Function<GatherFromSequenceParallelFn> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& local, int64_t total,
                               int64_t tp) {
    ctx->saved_data["tp"] = tp;
    return GatherRows(local, total, *FromInt<const TensorParallel>(tp));
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list g) {
    // Every rank ran what follows on the same whole rows: its gradient is
    // every rank's, and this rank's rows of it are its input's.
    const auto& tp = *FromInt<const TensorParallel>(ctx->saved_data["tp"].toInt());
    return {LocalRows(g[0], tp).contiguous(), torch::Tensor(), torch::Tensor()};
  }
};

struct ReduceScatterToSequenceParallelFn : torch::autograd::Function<ReduceScatterToSequenceParallelFn> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& partial, int64_t tp) {
    ctx->saved_data["tp"] = tp;
    ctx->saved_data["total"] = partial.size(1);
    return ReduceScatterRows(partial, *FromInt<const TensorParallel>(tp));
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list g) {
    const auto& tp = *FromInt<const TensorParallel>(ctx->saved_data["tp"].toInt());
    return {GatherRows(g[0], ctx->saved_data["total"].toInt(), tp), torch::Tensor()};
  }
};

// Up to three weights (a plain MLP's up; a gated one's gate and up; Q, K and
// V): unused slots repeat the last weight and take no gradient.
constexpr int kMaxWeights = 3;

struct GatheredMatmulsFn : torch::autograd::Function<GatheredMatmulsFn> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& local,
                                                const torch::Tensor& w0, const torch::Tensor& w1,
                                                const torch::Tensor& w2, int64_t n, int64_t total, int64_t tp,
                                                int64_t deferral, int64_t s0, int64_t s1, int64_t s2, int64_t copies) {
    ctx->save_for_backward({local});
    ctx->saved_data["copies"] = copies;
    ctx->saved_data["n"] = n;
    ctx->saved_data["total"] = total;
    ctx->saved_data["tp"] = tp;
    ctx->saved_data["deferral"] = deferral;
    ctx->saved_data["slots"] = std::vector<int64_t>{s0, s1, s2};
    const torch::Tensor x = GatherRows(local, total, *FromInt<const TensorParallel>(tp));
    const torch::Tensor w[kMaxWeights] = {w0, w1, w2};
    torch::autograd::variable_list out;
    for (int64_t i = 0; i < n; ++i) out.push_back(torch::matmul(x, w[i].t()));
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const torch::Tensor local = ctx->get_saved_variables()[0];
    const int64_t n = ctx->saved_data["n"].toInt();
    const auto& tp = *FromInt<const TensorParallel>(ctx->saved_data["tp"].toInt());
    auto* deferral = FromInt<WeightGradDeferral>(ctx->saved_data["deferral"].toInt());
    const std::vector<int64_t> slots = ctx->saved_data["slots"].toIntVector();
    const int64_t total = ctx->saved_data["total"].toInt();
    // Gathered again only where a weight gradient is made now (not for a
    // frozen layer's, nor under the W pass's deferral).
    bool weight_gradients = false;
    for (int64_t i = 0; i < n; ++i)
      weight_gradients = weight_gradients || (grads[i].defined() && ctx->needs_input_grad(1 + i));
    torch::Tensor x = weight_gradients && !deferral->active ? GatherRows(local, total, tp) : torch::Tensor();
    torch::autograd::variable_list out(1 + kMaxWeights + 8);
    // Weight gradients first, so that the gathered rows go before the input's
    // gradient is made. The W pass keeps this rank's rows and gathers them
    // when it runs (ApplyWeightGradients).
    for (int64_t i = 0; i < n; ++i) {
      const torch::Tensor& g = grads[i];
      if (!g.defined() || !ctx->needs_input_grad(1 + i)) continue;
      torch::Tensor* weight = FromInt<torch::Tensor>(slots[i]);
      if (deferral->active) {
        // Detached, as WeightGradDeferral says why.
        deferral->pending.push_back({*weight, local.detach(), g.detach(), total, &tp});
      } else {
        out[1 + i] = g.reshape({-1, g.size(-1)}).t().mm(x.reshape({-1, x.size(-1)}));
      }
    }
    if (!ctx->needs_input_grad(0)) return out;
    const torch::ScalarType dtype = local.scalar_type();
    x = torch::Tensor();
    torch::Tensor grad_x;
    for (int64_t i = 0; i < n; ++i) {
      if (!grads[i].defined()) continue;
      // The weight read from its slot, as DeferrableMatmul reads it (ZeRO-3
      // gathers it again before the backward).
      const torch::Tensor w = FromInt<const ComputeCopies>(ctx->saved_data["copies"].toInt())
                                  ->ForBackward(*FromInt<torch::Tensor>(slots[i]), dtype);
      grad_x = grad_x.defined() ? grad_x.addmm_(grads[i].reshape({-1, grads[i].size(-1)}), w)
                                : grads[i].reshape({-1, grads[i].size(-1)}).mm(w);
    }
    if (grad_x.defined()) out[0] = ReduceScatterRows(grad_x.unsqueeze(0), tp);
    return out;
  }
};

}  // namespace

torch::Tensor LocalRows(const torch::Tensor& whole, const TensorParallel& tp) {
  const weights::SliceSpan span = Span(whole.size(1), tp.rank, tp);
  return whole.narrow(1, span.begin, span.length);
}

torch::Tensor GatherRows(const torch::Tensor& local, int64_t total, const TensorParallel& tp) {
  const int64_t width = local.size(2), chunk = ChunkRows(total, tp);
  if (total == 0) return local.new_empty({1, 0, width});
  torch::Tensor mine = local.reshape({-1, width});
  if (mine.size(0) != chunk) mine = torch::constant_pad_nd(mine, {0, 0, 0, chunk - mine.size(0)});
  torch::Tensor all = torch::empty({tp.size * chunk * width}, local.options());
  tp.all_gather(mine.contiguous().view({-1}), all);
  if (chunk * tp.size == total) return all.view({1, total, width});  // equal shares: no padding to drop
  const torch::Tensor rows = all.view({tp.size, chunk, width});
  std::vector<torch::Tensor> parts;
  for (int r = 0; r < tp.size; ++r) parts.push_back(rows[r].narrow(0, 0, Span(total, r, tp).length));
  return torch::cat(parts, 0).unsqueeze(0);
}

torch::Tensor ReduceScatterRows(const torch::Tensor& partial, const TensorParallel& tp) {
  const int64_t total = partial.size(1), width = partial.size(2), chunk = ChunkRows(total, tp);
  const weights::SliceSpan mine = Span(total, tp.rank, tp);
  if (total == 0) return partial.new_empty({1, 0, width});
  torch::Tensor in;
  if (chunk * tp.size == total) {
    in = partial.contiguous().view({-1});  // rank r's rows are chunk r already
  } else {
    in = torch::zeros({tp.size * chunk * width}, partial.options());
    const torch::Tensor rows = in.view({tp.size, chunk, width});
    for (int r = 0; r < tp.size; ++r) {
      const weights::SliceSpan s = Span(total, r, tp);
      rows[r].narrow(0, 0, s.length).copy_(partial[0].narrow(0, s.begin, s.length));
    }
  }
  torch::Tensor received = torch::empty_like(in);
  tp.all_to_all(in, received);
  return received.view({tp.size, chunk, width}).sum(0).narrow(0, 0, mine.length).unsqueeze(0);
}

torch::Tensor ScatterToSequenceParallel(const torch::Tensor& whole, const TensorParallel* tp) {
  return ScatterToSequenceParallelFn::apply(whole, AsInt(tp));
}

torch::Tensor GatherFromSequenceParallel(const torch::Tensor& local, int64_t total, const TensorParallel* tp) {
  return GatherFromSequenceParallelFn::apply(local, total, AsInt(tp));
}

torch::Tensor ReduceScatterToSequenceParallel(const torch::Tensor& partial, const TensorParallel* tp) {
  return ReduceScatterToSequenceParallelFn::apply(partial, AsInt(tp));
}

std::vector<torch::Tensor> GatheredMatmuls(const torch::Tensor& local, int64_t total,
                                           const std::vector<torch::Tensor>& weights,
                                           const std::vector<torch::Tensor*>& slots, WeightGradDeferral* deferral,
                                           const TensorParallel* tp, const ComputeCopies* copies) {
  const int64_t n = static_cast<int64_t>(weights.size());
  if (n < 1 || n > kMaxWeights || slots.size() != weights.size()) {
    throw std::logic_error("GatheredMatmuls: 1 to 3 weights, each with its slot");
  }
  auto at = [&](int64_t i) { return std::min(i, n - 1); };
  return GatheredMatmulsFn::apply(local, weights[at(0)], weights[at(1)], weights[at(2)], n, total, AsInt(tp),
                                  AsInt(deferral), AsInt(slots[at(0)]), AsInt(slots[at(1)]), AsInt(slots[at(2)]),
                                  AsInt(copies));
}

}  // namespace loom::runtime
