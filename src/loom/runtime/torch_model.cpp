#include "loom/runtime/torch_model.h"

#include <fmt/format.h>

#include <cmath>

#include "loom/error.h"

namespace loom::runtime {

namespace {

enum Kind { kEmbed, kBlock, kHead };

struct EmbedImpl : torch::nn::Module {
  explicit EmbedImpl(const Layer& l) { table = register_module("table", torch::nn::Embedding(l.vocab, l.hidden)); }
  torch::Tensor forward(const torch::Tensor& ids) { return table->forward(ids); }
  torch::nn::Embedding table{nullptr};
};

struct HeadImpl : torch::nn::Module {
  explicit HeadImpl(const Layer& l) {
    proj = register_module("proj", torch::nn::Linear(torch::nn::LinearOptions(l.hidden, l.vocab).bias(false)));
  }
  torch::Tensor forward(const torch::Tensor& x) { return proj->forward(x); }
  torch::nn::Linear proj{nullptr};
};

torch::nn::Linear NoBias(int64_t in, int64_t out) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
}

// Megatron's f and g operators: f is the identity forward and sums the input
// gradient over the TP group backward; g sums the forward and is the identity
// backward. The process's TP group is set once per worker (one per process).
std::function<void(torch::Tensor&)>* g_tp_all_reduce = nullptr;

struct CopyToTensorParallel : torch::autograd::Function<CopyToTensorParallel> {
  static torch::Tensor forward(torch::autograd::AutogradContext*, torch::Tensor x) { return x.view_as(x); }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list g) {
    torch::Tensor sum = g[0].contiguous().clone();
    (*g_tp_all_reduce)(sum);
    return {sum};
  }
};

struct ReduceFromTensorParallel : torch::autograd::Function<ReduceFromTensorParallel> {
  static torch::Tensor forward(torch::autograd::AutogradContext*, torch::Tensor x) {
    torch::Tensor sum = x.contiguous().clone();
    (*g_tp_all_reduce)(sum);
    return sum;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list g) {
    return {g[0]};
  }
};

// Keeps rows (dim 0, column parallel) or columns (dim 1, row parallel) [lo, hi) of a linear's weight.
void Shard(torch::nn::Linear& lin, int dim, int64_t lo, int64_t hi) {
  torch::NoGradGuard no_grad;
  lin->weight.set_data(lin->weight.slice(dim, lo, hi).clone());
}

struct BlockImpl : torch::nn::Module {
  BlockImpl(const Layer& l, const TensorParallel& tp)
      : heads(l.heads / tp.size), kv_heads((l.kv_heads > 0 ? l.kv_heads : l.heads) / tp.size),
        head_dim(l.hidden / l.heads), causal(l.causal), gated(l.gated_mlp), tp_size(tp.size) {
    // Built whole (the seeded initial weights of the single-process model), then sharded.
    const int64_t all_heads = l.heads, all_kv = l.kv_heads > 0 ? l.kv_heads : l.heads;
    norm1 = register_module("norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({l.hidden})));
    q = register_module("q", NoBias(l.hidden, all_heads * head_dim));
    k = register_module("k", NoBias(l.hidden, all_kv * head_dim));
    v = register_module("v", NoBias(l.hidden, all_kv * head_dim));
    o = register_module("o", NoBias(all_heads * head_dim, l.hidden));
    norm2 = register_module("norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({l.hidden})));
    up = register_module("up", NoBias(l.hidden, l.ffn_hidden));
    if (gated) gate = register_module("gate", NoBias(l.hidden, l.ffn_hidden));
    down = register_module("down", NoBias(l.ffn_hidden, l.hidden));
    if (tp.size > 1) {
      const int64_t t = tp.rank, f = l.ffn_hidden / tp.size;
      Shard(q, 0, t * heads * head_dim, (t + 1) * heads * head_dim);
      Shard(k, 0, t * kv_heads * head_dim, (t + 1) * kv_heads * head_dim);
      Shard(v, 0, t * kv_heads * head_dim, (t + 1) * kv_heads * head_dim);
      Shard(o, 1, t * heads * head_dim, (t + 1) * heads * head_dim);
      Shard(up, 0, t * f, (t + 1) * f);
      if (gated) Shard(gate, 0, t * f, (t + 1) * f);
      Shard(down, 1, t * f, (t + 1) * f);
    }
  }
  torch::Tensor ToShards(const torch::Tensor& x) const {
    return tp_size > 1 ? CopyToTensorParallel::apply(x) : x;
  }
  torch::Tensor FromShards(const torch::Tensor& x) const {
    return tp_size > 1 ? ReduceFromTensorParallel::apply(x) : x;
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const int64_t n = x.size(0), s = x.size(1);
    auto h = ToShards(norm1->forward(x));
    auto split = [&](const torch::Tensor& t, int64_t groups) { return t.view({n, s, groups, head_dim}).transpose(1, 2); };
    auto Q = split(q->forward(h), heads);
    auto K = split(k->forward(h), kv_heads);
    auto V = split(v->forward(h), kv_heads);
    if (kv_heads != heads) {  // grouped-query attention: each K/V head serves heads / kv_heads query heads
      K = K.repeat_interleave(heads / kv_heads, 1);
      V = V.repeat_interleave(heads / kv_heads, 1);
    }
    auto scores = torch::matmul(Q, K.transpose(-2, -1)) / std::sqrt(static_cast<double>(head_dim));
    if (causal) {
      auto mask = torch::ones({s, s}, torch::kBool).triu(1);
      scores = scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
    }
    auto attn = torch::matmul(torch::softmax(scores, -1), V).transpose(1, 2).reshape({n, s, heads * head_dim});
    auto y = x + FromShards(o->forward(attn));
    auto m = ToShards(norm2->forward(y));
    auto inner = gated ? torch::silu(gate->forward(m)) * up->forward(m) : torch::gelu(up->forward(m));
    return y + FromShards(down->forward(inner));
  }
  int64_t heads, kv_heads, head_dim;
  bool causal, gated;
  int tp_size;
  torch::nn::LayerNorm norm1{nullptr}, norm2{nullptr};
  torch::nn::Linear q{nullptr}, k{nullptr}, v{nullptr}, o{nullptr}, up{nullptr}, gate{nullptr}, down{nullptr};
};

TORCH_MODULE(Embed);
TORCH_MODULE(Head);
TORCH_MODULE(Block);

}  // namespace

void CheckRunnable(const Model& model, const std::vector<LayerRange>& layers) {
  for (const auto& r : layers) {
    const Module& m = model.modules[model.FindModule(r.module)];
    for (int li = r.begin; li < r.end; ++li) {
      const Layer& l = m.layers[li];
      const std::string where = fmt::format("{} layer {} ({})", r.module, li, LayerKindName(l.kind));
      switch (l.kind) {
        case LayerKind::kEmbedding:
          if (l.positions > 0) throw Error(fmt::format("runtime: {}: learned positions are not built yet", where));
          break;
        case LayerKind::kTransformer:
          if (l.cross_attention) throw Error(fmt::format("runtime: {}: cross-attention is not built yet", where));
          break;
        case LayerKind::kLmHead:
          if (l.tied) {
            throw Error(fmt::format("runtime: {}: a tied LM head (weights shared with the embedding, possibly on "
                                    "another rank) is not built yet; untie it in the model spec",
                                    where));
          }
          break;
        default:
          throw Error(fmt::format("runtime: {}: the runtime cannot build this layer kind yet; it builds embedding, "
                                  "transformer and lm_head",
                                  where));
      }
    }
  }
}

LayerStackImpl::LayerStackImpl(const Model& model, const std::vector<LayerRange>& ranges, uint64_t seed,
                               const TensorParallel& tp) {
  CheckRunnable(model, ranges);
  if (tp.size > 1) {
    static std::function<void(torch::Tensor&)> reduce;  // the worker process's one TP group
    reduce = tp.all_reduce;
    g_tp_all_reduce = &reduce;
  }
  for (const auto& r : ranges) {
    const int mi = model.FindModule(r.module);
    for (int li = r.begin; li < r.end; ++li) {
      const Layer& l = model.modules[mi].layers[li];
      torch::manual_seed(seed * 1000003 + static_cast<uint64_t>(mi) * 10007 + static_cast<uint64_t>(li));
      const std::string name = fmt::format("{}_{}", r.module, li);
      std::shared_ptr<torch::nn::Module> layer;
      int kind = kBlock;
      if (l.kind == LayerKind::kEmbedding) {
        layer = register_module(name, Embed(l));
        kind = kEmbed;
      } else if (l.kind == LayerKind::kLmHead) {
        layer = register_module(name, Head(l));
        kind = kHead;
      } else {
        if (l.heads % tp.size != 0 || (l.kv_heads > 0 ? l.kv_heads : l.heads) % tp.size != 0 ||
            l.ffn_hidden % tp.size != 0) {
          throw Error(fmt::format("runtime: {} layer {}: {} heads, {} kv heads and ffn {} must divide by tp {}",
                                  r.module, li, l.heads, l.kv_heads, l.ffn_hidden, tp.size));
        }
        layer = register_module(name, Block(l, tp));
      }
      // Frozen layers (Cornstarch): no weight gradients and no optimizer state.
      if (l.frozen) {
        for (auto& p : layer->parameters()) p.set_requires_grad(false);
      }
      layers_.push_back(std::move(layer));
      kinds_.push_back(kind);
    }
  }
}

torch::Tensor LayerStackImpl::forward(torch::Tensor x) {
  for (size_t i = 0; i < layers_.size(); ++i) {
    switch (kinds_[i]) {
      case kEmbed: x = std::static_pointer_cast<EmbedImpl>(layers_[i])->forward(x); break;
      case kHead: x = std::static_pointer_cast<HeadImpl>(layers_[i])->forward(x); break;
      default: x = std::static_pointer_cast<BlockImpl>(layers_[i])->forward(x); break;
    }
  }
  return x;
}

torch::Tensor TokenIds(const Batch& batch, const std::vector<int>& samples, int64_t iteration, int64_t vocab,
                       bool targets) {
  if (samples.empty()) throw Error("runtime: a microbatch without samples");
  const int64_t G = static_cast<int64_t>(batch.samples.size());
  int64_t seq = -1;
  std::vector<int64_t> ids;
  for (int x : samples) {
    int64_t len = 0;
    for (int64_t t : batch.samples[x].doc_text_tokens) len += t;
    if (seq >= 0 && len != seq) {
      throw Error(fmt::format("runtime: samples of {} and {} text tokens in one microbatch; the runtime needs "
                              "equal lengths (the text workload)",
                              seq, len));
    }
    seq = len;
    const int64_t offset = 13 * (iteration * G + x);
    for (int64_t p = 0; p < len; ++p) ids.push_back((7 * (p + (targets ? 1 : 0)) + offset) % vocab);
  }
  return torch::tensor(ids, torch::kLong).view({static_cast<int64_t>(samples.size()), seq});
}

}  // namespace loom::runtime
