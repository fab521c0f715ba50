#include "loom/runtime/torch_model.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <set>

#include "loom/cost/layer_work.h"
#include "loom/error.h"
#include "loom/runtime/attention.h"
#include "loom/runtime/autograd_pointers.h"
#include "loom/runtime/bitfield_attention.h"
#include "loom/runtime/cross_entropy.h"
#include "loom/runtime/layer_ops.h"
#include "loom/runtime/rotary.h"
#include "loom/runtime/runnable_layers.h"
#include "loom/runtime/sequence_parallel.h"
#include "loom/weights/checkpoint_parts.h"
#include "loom/weights/safetensors.h"

namespace loom::runtime {

namespace {

// Megatron's f and g operators: f is the identity forward and sums the input
// gradient over the TP group backward; g sums the forward and is the identity
// backward.
struct CopyToTensorParallel : torch::autograd::Function<CopyToTensorParallel> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x, int64_t tp) {
    ctx->saved_data["tp"] = tp;
    return x.view_as(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list g) {
    torch::Tensor sum = g[0].contiguous().clone();
    FromInt<TensorParallel>(ctx->saved_data["tp"].toInt())->all_reduce(sum);
    return {sum, torch::Tensor()};
  }
};

struct ReduceFromTensorParallel : torch::autograd::Function<ReduceFromTensorParallel> {
  static torch::Tensor forward(torch::autograd::AutogradContext*, torch::Tensor x, int64_t tp) {
    torch::Tensor sum = x.contiguous().clone();
    FromInt<TensorParallel>(tp)->all_reduce(sum);
    return sum;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*, torch::autograd::variable_list g) {
    return {g[0], torch::Tensor()};
  }
};

// The identity, whose backward first calls the stack's hooks for the layer
// whose output it is (LayerHooks::BeforeBackward).
struct BeforeLayerBackward : torch::autograd::Function<BeforeLayerBackward> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x, int64_t hooks, int64_t layer) {
    ctx->saved_data["hooks"] = hooks;
    ctx->saved_data["layer"] = layer;
    return x.view_as(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list g) {
    FromInt<LayerHooks>(ctx->saved_data["hooks"].toInt())
        ->BeforeBackward(static_cast<int>(ctx->saved_data["layer"].toInt()));
    return {g[0], torch::Tensor(), torch::Tensor()};
  }
};

// The weight a backward multiplies by: the parameter in `slot` (under ZeRO-3
// gathered again before the backward) in the compute dtype `like`'s. Read
// from the slot rather than saved: a saved bf16 copy would keep a released
// ZeRO-3 stage's whole weights alive from each forward to its backward.
torch::Tensor WeightForBackward(const c10::IValue& slot, const c10::IValue& copies, const torch::Tensor& like) {
  return FromInt<const ComputeCopies>(copies.toInt())
      ->ForBackward(*FromInt<torch::Tensor>(slot.toInt()), like.scalar_type());
}

// x W^T whose weight gradient can wait for the W pass (WeightGradDeferral).
// `w` is the parameter in `weight_slot` or its compute-dtype copy.
struct DeferrableMatmul : torch::autograd::Function<DeferrableMatmul> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x, torch::Tensor w,
                               int64_t deferral, int64_t weight_slot, int64_t copies) {
    ctx->save_for_backward({x});
    ctx->saved_data["deferral"] = deferral;
    ctx->saved_data["slot"] = weight_slot;
    ctx->saved_data["copies"] = copies;
    return torch::matmul(x, w.t());
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &g = grads[0];
    torch::Tensor grad_x =
        ctx->needs_input_grad(0)
            ? torch::matmul(g, WeightForBackward(ctx->saved_data["slot"], ctx->saved_data["copies"], x))
            : torch::Tensor();
    torch::Tensor grad_w;
    if (ctx->needs_input_grad(1)) {
      auto* deferral = FromInt<WeightGradDeferral>(ctx->saved_data["deferral"].toInt());
      if (deferral->active) {
        deferral->pending.push_back({*FromInt<torch::Tensor>(ctx->saved_data["slot"].toInt()), x.detach(), g.detach()});
      } else {
        grad_w = g.reshape({-1, g.size(-1)}).t().mm(x.reshape({-1, x.size(-1)}));
      }
    }
    return {grad_x, grad_w, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// act(x) W^T (or (act(gate) * up) W^T), the MLP's down projection of its
// activation under selective recomputation (Recompute::kSelective, as the
// simulator prices it: the activation's output is not kept, its input is;
// the backward recomputes it). Its weight gradient can wait for the W pass.
struct ActivatedMatmul : torch::autograd::Function<ActivatedMatmul> {
  // `gated` false: a plain MLP, `up` is x again (no undefined inputs) and gets no gradient.
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x, torch::Tensor up,
                               torch::Tensor w, int64_t activation, bool gated, int64_t deferral, int64_t weight_slot,
                               int64_t copies) {
    ctx->save_for_backward(gated ? std::vector<torch::Tensor>{x, up} : std::vector<torch::Tensor>{x});
    ctx->saved_data["activation"] = activation;
    ctx->saved_data["deferral"] = deferral;
    ctx->saved_data["slot"] = weight_slot;
    ctx->saved_data["copies"] = copies;
    const torch::Tensor act = Activate(static_cast<Activation>(activation), gated, x);
    return torch::matmul(gated ? act * up : act, w.t());
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& g = grads[0];
    const bool gated = saved.size() == 2;
    const bool want_x = ctx->needs_input_grad(0), want_up = gated && ctx->needs_input_grad(1);
    const torch::Tensor x = saved[0].detach().requires_grad_(want_x);
    const torch::Tensor up = gated ? saved[1].detach().requires_grad_(want_up) : torch::Tensor();
    torch::Tensor a;
    {
      torch::AutoGradMode enable(true);
      a = Activate(static_cast<Activation>(ctx->saved_data["activation"].toInt()), gated, x);
      if (gated) a = a * up;
    }
    torch::Tensor grad_w;
    if (ctx->needs_input_grad(2)) {
      auto* deferral = FromInt<WeightGradDeferral>(ctx->saved_data["deferral"].toInt());
      if (deferral->active) {
        deferral->pending.push_back({*FromInt<torch::Tensor>(ctx->saved_data["slot"].toInt()), a.detach(), g.detach()});
      } else {
        grad_w = g.reshape({-1, g.size(-1)}).t().mm(a.detach().reshape({-1, a.size(-1)}));
      }
    }
    torch::Tensor grad_x, grad_up;
    std::vector<torch::Tensor> wrt;
    if (want_x) wrt.push_back(x);
    if (want_up) wrt.push_back(up);
    if (!wrt.empty()) {
      const auto d = torch::autograd::grad(
          {a}, wrt, {torch::matmul(g, WeightForBackward(ctx->saved_data["slot"], ctx->saved_data["copies"], a))});
      if (want_x) grad_x = d[0];
      if (want_up) grad_up = d[want_x ? 1 : 0];
    }
    return {grad_x,          grad_up,         grad_w,          torch::Tensor(),
            torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// A replicated parameter that reads only this rank's rows under sequence
// parallelism (a norm's weight, a row-parallel bias): passed through
// Megatron's f, so that its gradient sums over the TP group, as Megatron
// all-reduces the gradients of such parameters (`sequence_parallel`
// attribute). `split_rows` null or without sequence parallelism: `p` itself.
torch::Tensor SumGradientOverRows(const torch::Tensor& p, const TensorParallel* split_rows) {
  if (split_rows == nullptr || !split_rows->sequence_parallel || !p.defined()) return p;
  return CopyToTensorParallel::apply(p, AsInt(split_rows));
}

// A linear layer (torch's default initialisation) whose matmul can defer its weight gradient.
struct DenseImpl : torch::nn::Module {
  DenseImpl(int64_t in, int64_t out, bool bias, WeightGradDeferral* deferral, ComputeCopies* copies)
      : deferral(deferral), copies(copies) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    weight = register_parameter("weight", torch::empty({out, in}).uniform_(-bound, bound));
    if (bias) this->bias = register_parameter("bias", torch::empty({out}).uniform_(-bound, bound));
  }
  torch::Tensor forward(const torch::Tensor& x) { return AddBias(Matmul(x)); }
  torch::Tensor AddBias(const torch::Tensor& y) { return bias.defined() ? y + copies->Of(bias) : y; }
  // x in the compute dtype times its copy of the weight; the deferred weight
  // gradient goes to the fp32 weight itself.
  torch::Tensor Matmul(const torch::Tensor& x) {
    return DeferrableMatmul::apply(copies->Cast(x), copies->Of(weight), AsInt(deferral), AsInt(&weight), AsInt(copies));
  }
  // A row-parallel layer's output from this shard's partial product x W^T:
  // the shards' partial products summed by `reduce`, then the bias once
  // (Megatron's RowParallelLinear adds it after the all-reduce). `split_rows`: under
  // sequence parallelism `reduce` leaves this rank's rows, so the bias's
  // gradient sums over the group (SumGradientOverRows).
  template <typename Reduce>
  torch::Tensor RowParallelSum(const torch::Tensor& partial, Reduce&& reduce,
                               const TensorParallel* split_rows = nullptr) {
    torch::Tensor y = reduce(partial);
    return bias.defined() ? y + SumGradientOverRows(copies->Of(bias), split_rows) : y;
  }
  // act(x) W^T or (act(gate) * up) W^T, keeping x (and up), not the activation (ActivatedMatmul).
  torch::Tensor MatmulOfActivation(Activation activation, const torch::Tensor& x, const torch::Tensor& up) {
    const bool gated = up.defined();
    return ActivatedMatmul::apply(x, gated ? up : x, copies->Of(weight), static_cast<int64_t>(activation), gated,
                                  AsInt(deferral), AsInt(&weight), AsInt(copies));
  }
  // Keeps rows (dim 0: column parallel, the bias too) or columns (dim 1: row
  // parallel, the bias whole) [lo, hi).
  void Shard(int dim, int64_t lo, int64_t hi) {
    torch::NoGradGuard no_grad;
    weight.set_data(weight.slice(dim, lo, hi).clone());
    if (dim == 0 && bias.defined()) bias.set_data(bias.slice(0, lo, hi).clone());
  }
  torch::Tensor weight, bias;
  WeightGradDeferral* deferral;
  ComputeCopies* copies;
};
TORCH_MODULE(Dense);

// A layer's norm (spec/layer.h NormKind): LayerNorm with weight and bias, or
// RMSNorm with a weight only, as transformers' LlamaRMSNorm computes it: the
// mean square in float32, x * rsqrt(mean + eps), cast back, times the weight.
struct NormImpl : torch::nn::Module {
  NormImpl(NormKind kind, int64_t width, double eps, ComputeCopies* copies) : kind(kind), eps(eps), copies(copies) {
    weight = register_parameter("weight", torch::ones({width}));
    if (kind == NormKind::kLayerNorm) bias = register_parameter("bias", torch::zeros({width}));
  }
  // `split_rows`: x holds this rank's rows under sequence parallelism, so
  // the weight's and bias's gradients sum over the group (SumGradientOverRows).
  torch::Tensor forward(const torch::Tensor& x, const TensorParallel* split_rows = nullptr) {
    return Apply(x, SumGradientOverRows(copies->Of(weight), split_rows), split_rows);
  }
  // With `w` standing for the weight: a TP rank's copy of a replicated weight
  // that only its shard of the heads reads (Qwen3's q/k norms), passed through
  // Megatron's f so that its gradient sums over the TP group.
  torch::Tensor Apply(const torch::Tensor& x, const torch::Tensor& w, const TensorParallel* split_rows = nullptr) {
    if (kind == NormKind::kLayerNorm) {
      return torch::layer_norm(x, {x.size(-1)}, w, SumGradientOverRows(copies->Of(bias), split_rows), eps);
    }
    return RmsNorm(x, w, eps);
  }
  NormKind kind;
  double eps;
  ComputeCopies* copies;
  torch::Tensor weight, bias;
};
TORCH_MODULE(Norm);

// Tokens per block of the bitfield path (Cornstarch's N_B is 128; the tiny
// test models' sequences are shorter, so smaller blocks exercise the skipping).
constexpr int64_t kBitfieldBlockTokens = 32;

struct BlockImpl;
using Layout = c10::intrusive_ptr<AttentionLayout>;
torch::Tensor RunBlock(BlockImpl& block, const torch::Tensor& x, const Layout& layout, bool selective);

// Full activation checkpointing (the reentrant scheme of PyTorch's
// torch.utils.checkpoint): the forward runs the layer without a graph and
// keeps only its input; the backward runs it again with one and
// back-propagates through it. The block outlives the graph; the attention
// layout travels in the context.
struct Checkpoint : torch::autograd::Function<Checkpoint> {
  static torch::Tensor Run(int64_t block, const torch::Tensor& x, const Layout& layout) {
    return RunBlock(*FromInt<BlockImpl>(block), x, layout, false);
  }
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x, int64_t block,
                               c10::IValue layout) {
    ctx->save_for_backward({x});
    ctx->saved_data["block"] = block;
    ctx->saved_data["layout"] = layout;
    torch::NoGradGuard no_grad;
    return Run(block, x, c10::static_intrusive_pointer_cast<AttentionLayout>(layout.toCapsule()));
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list g) {
    torch::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    torch::Tensor y;
    {
      torch::AutoGradMode enable(true);
      y = Run(ctx->saved_data["block"].toInt(), x,
              c10::static_intrusive_pointer_cast<AttentionLayout>(ctx->saved_data["layout"].toCapsule()));
    }
    torch::autograd::backward({y}, {g[0]});
    return {x.grad(), torch::Tensor(), torch::Tensor()};
  }
};

struct BlockImpl : torch::nn::Module {
  BlockImpl(const Layer& l, TensorParallel* tp, ContextParallel* cp, WeightGradDeferral* deferral,
            ComputeCopies* copies)
      : heads(l.heads / tp->size),
        kv_heads((l.kv_heads > 0 ? l.kv_heads : l.heads) / tp->size),
        head_dim(l.HeadDim()),
        causal(l.causal),
        gated(l.gated_mlp),
        activation(l.activation),
        tp(tp),
        cp(cp),
        copies(copies) {
    // Built whole (the seeded initial weights of the single-process model), then sharded.
    const int64_t all_heads = l.heads, all_kv = l.kv_heads > 0 ? l.kv_heads : l.heads;
    auto dense = [&](const char* name, int64_t in, int64_t out, bool bias) {
      return register_module(name, Dense(in, out, bias, deferral, copies));
    };
    norm1 = register_module("norm1", Norm(l.norm, l.hidden, l.norm_eps, copies));
    q = dense("q", l.hidden, all_heads * head_dim, l.qkv_bias);
    k = dense("k", l.hidden, all_kv * head_dim, l.qkv_bias);
    v = dense("v", l.hidden, all_kv * head_dim, l.qkv_bias);
    o = dense("o", all_heads * head_dim, l.hidden, l.out_bias);
    if (l.qk_norm) {  // Qwen3: one RMSNorm over head_dim, shared by every head
      q_norm = register_module("q_norm", Norm(NormKind::kRmsNorm, head_dim, l.norm_eps, copies));
      k_norm = register_module("k_norm", Norm(NormKind::kRmsNorm, head_dim, l.norm_eps, copies));
    }
    if (l.rope.theta > 0) rope_inverse_frequencies = RopeInverseFrequencies(l.rope, head_dim);
    norm2 = register_module("norm2", Norm(l.norm, l.hidden, l.norm_eps, copies));
    up = dense("up", l.hidden, l.ffn_hidden, l.mlp_bias);
    if (gated) gate = dense("gate", l.hidden, l.ffn_hidden, l.mlp_bias);
    down = dense("down", l.ffn_hidden, l.hidden, l.mlp_bias);
    if (tp->size > 1) {
      const int64_t t = tp->rank, f = l.ffn_hidden / tp->size;
      q->Shard(0, t * heads * head_dim, (t + 1) * heads * head_dim);
      k->Shard(0, t * kv_heads * head_dim, (t + 1) * kv_heads * head_dim);
      v->Shard(0, t * kv_heads * head_dim, (t + 1) * kv_heads * head_dim);
      o->Shard(1, t * heads * head_dim, (t + 1) * heads * head_dim);
      up->Shard(0, t * f, (t + 1) * f);
      if (gated) gate->Shard(0, t * f, (t + 1) * f);
      down->Shard(1, t * f, (t + 1) * f);
    }
  }
  torch::Tensor ToShards(const torch::Tensor& x) const {
    return tp->size > 1 ? CopyToTensorParallel::apply(x, AsInt(tp)) : x;
  }
  torch::Tensor FromShards(const torch::Tensor& x) const {
    if (tp->sequence_parallel) return ReduceScatterToSequenceParallel(x, tp);
    return tp->size > 1 ? ReduceFromTensorParallel::apply(x, AsInt(tp)) : x;
  }
  // Column-parallel projections of one normed input (with their biases): its
  // rows gathered under sequence parallelism, keeping this rank's rows only
  // (runtime/sequence_parallel.h GatheredMatmuls), else through Megatron's f.
  // `rows`: the module's whole rows.
  std::vector<torch::Tensor> Columns(const torch::Tensor& normed, const std::vector<DenseImpl*>& layers, int64_t rows) {
    std::vector<torch::Tensor> out;
    if (!tp->sequence_parallel) {
      const torch::Tensor h = ToShards(normed);
      for (DenseImpl* d : layers) out.push_back(d->forward(h));
      return out;
    }
    std::vector<torch::Tensor> weights;
    std::vector<torch::Tensor*> slots;
    for (DenseImpl* d : layers) {
      weights.push_back(copies->Of(d->weight));
      slots.push_back(&d->weight);
    }
    out = GatheredMatmuls(copies->Cast(normed), rows, weights, slots, layers[0]->deferral, tp, copies);
    for (size_t i = 0; i < out.size(); ++i) out[i] = layers[i]->AddBias(out[i]);
    return out;
  }
  // x [1, T, hidden] (with CP or sequence parallelism: this rank's rows);
  // `layout` who attends to whom. Selective recomputation recomputes the MLP's activation (the
  // simulator's Recompute::kSelective; attention is fused and keeps no scores
  // to recompute), full recomputation the layer.
  torch::Tensor forward(const torch::Tensor& x, const Layout& layout, Recompute recompute) {
    if (recompute == Recompute::kFull) return Checkpoint::apply(x, AsInt(this), c10::IValue::make_capsule(layout));
    return Run(x, layout, recompute == Recompute::kSelective);
  }
  torch::Tensor Attention(const torch::Tensor& Q, const torch::Tensor& K, const torch::Tensor& V,
                          const Layout& layout) {
    // Context parallelism and bitfield masks do not use SDPA whole (attention.h
    // says why); the ring and the blocked path take grouped-query heads as
    // they are.
    if (cp->size > 1) {
      if (layout->all_gather) return AllGatherAttention(Q, K, V, layout, causal, kBitfieldBlockTokens, cp);
      // Under bf16 the ring runs in fp32 (as SDPA's statistics do), its K/V
      // blocks travelling in fp32 too, and keeps Q, K, V and its output in
      // bf16 (fp32 copies kept measured 1.19-1.25x the predicted peak at CP 2).
      // Grouped-query K/V go unexpanded.
      return RingAttention(Q, K, V, layout, causal, cp);
    }
    if (!layout->mask.empty()) {
      return BitfieldAttention(Q, K, V, layout->mask, kBitfieldBlockTokens,
                               &layout->KvBlocksOf(layout->mask, kBitfieldBlockTokens));
    }
    return Attend(Q, K, V, layout->lengths, causal);
  }
  torch::Tensor Run(const torch::Tensor& x, const Layout& layout, bool selective) {
    const int64_t T = tp->sequence_parallel ? layout->tokens : x.size(1);  // the rows attention reads
    const TensorParallel* rows = tp->sequence_parallel ? tp : nullptr;     // x is this rank's rows
    const std::vector<torch::Tensor> qkv = Columns(norm1->forward(x, rows), {q.get(), k.get(), v.get()}, T);
    auto Q = qkv[0].view({1, T, heads, head_dim});
    auto K = qkv[1].view({1, T, kv_heads, head_dim});
    auto V = qkv[2].view({1, T, kv_heads, head_dim});
    if (q_norm) {  // each TP rank normalises its own heads: the weights' gradients sum over the group
      Q = q_norm->Apply(Q, ToShards(copies->Of(q_norm->weight)));
      K = k_norm->Apply(K, ToShards(copies->Of(k_norm->weight)));
    }
    if (rope_inverse_frequencies.defined()) {
      const RopeTables& tables = layout->RopeTablesOf(rope_inverse_frequencies, x.device(), x.scalar_type());
      Q = ApplyRope(Q, tables);
      K = ApplyRope(K, tables);
    }
    // Grouped-query K/V (kv_heads < heads) stay unexpanded: SDPA takes them so.
    const torch::Tensor attn = Attention(Q, K, V, layout);
    auto reduce = [&](const torch::Tensor& t) { return FromShards(t); };
    auto y = x + o->RowParallelSum(o->Matmul(attn.reshape({1, T, heads * head_dim})), reduce, rows);
    const std::vector<torch::Tensor> gu =
        Columns(norm2->forward(y, rows),
                gated ? std::vector<DenseImpl*>{gate.get(), up.get()} : std::vector<DenseImpl*>{up.get()}, T);
    const torch::Tensor g = gated ? gu[0] : torch::Tensor(), u = gu.back();
    if (selective) {  // the activation's output is recomputed in the backward, not kept
      return y + down->RowParallelSum(gated ? down->MatmulOfActivation(activation, g, u)
                                            : down->MatmulOfActivation(activation, u, torch::Tensor()),
                                      reduce, rows);
    }
    const torch::Tensor inner = gated ? MlpActivation(activation, g, u) : MlpActivation(activation, u);
    return y + down->RowParallelSum(down->Matmul(inner), reduce, rows);
  }
  int64_t heads, kv_heads, head_dim;
  bool causal, gated;
  Activation activation;
  TensorParallel* tp;
  ContextParallel* cp;
  ComputeCopies* copies;
  Norm norm1{nullptr}, norm2{nullptr}, q_norm{nullptr}, k_norm{nullptr};
  Dense q{nullptr}, k{nullptr}, v{nullptr}, o{nullptr}, up{nullptr}, gate{nullptr}, down{nullptr};
  torch::Tensor rope_inverse_frequencies;  // [head_dim / 2], float32; undefined: no rotary positions
};
TORCH_MODULE(Block);

torch::Tensor RunBlock(BlockImpl& block, const torch::Tensor& x, const Layout& layout, bool selective) {
  return block.Run(x, layout, selective);
}

// LLaVA's multi-modal projector (LlavaMultiModalProjector): linear_1, the
// activation (projector_hidden_act; exact GELU by default), linear_2. Under
// TP an MLP as Megatron splits one: linear_1 column parallel (rows
// weights::SliceSpanOf(hidden, rank, size) of its weight and bias), linear_2
// row parallel, its bias added after the sum, as the simulator prices it.
struct ProjectorImpl : torch::nn::Module {
  ProjectorImpl(const Layer& l, WeightGradDeferral* deferral, ComputeCopies* copies, TensorParallel* tp)
      : activation(l.activation == Activation::kDefault ? Activation::kGelu : l.activation), tp(tp) {
    fc1 = register_module("fc1", Dense(l.in_dim, l.hidden, l.bias, deferral, copies));
    fc2 = register_module("fc2", Dense(l.hidden, l.out_dim, l.bias, deferral, copies));
    if (tp->size > 1) {
      const weights::SliceSpan rows = weights::SliceSpanOf(l.hidden, tp->rank, tp->size);
      fc1->Shard(0, rows.begin, rows.begin + rows.length);
      fc2->Shard(1, rows.begin, rows.begin + rows.length);
    }
  }
  torch::Tensor forward(const torch::Tensor& x) {
    if (tp->size == 1) return fc2->forward(Activate(activation, false, fc1->forward(x)));
    const torch::Tensor inner = Activate(activation, false, fc1->forward(CopyToTensorParallel::apply(x, AsInt(tp))));
    return fc2->RowParallelSum(fc2->Matmul(inner),
                               [&](const torch::Tensor& t) { return ReduceFromTensorParallel::apply(t, AsInt(tp)); });
  }
  Activation activation;
  TensorParallel* tp;
  Dense fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Projector);

// The token ids of text positions [begin, begin + n) of sample x's document d
// (`shift` 1: the next-token targets).
torch::Tensor TextIds(int x, int d, int64_t begin, int64_t n, const MicrobatchInput& mb, int64_t vocab, int shift) {
  if (mb.text) {
    const std::vector<int64_t>& row = (shift == 0 ? mb.text->ids : mb.text->labels).at(x).at(d);
    std::vector<int64_t> out(static_cast<size_t>(n), -100);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t at = begin + shift + i;
      if (at < static_cast<int64_t>(row.size())) out[static_cast<size_t>(i)] = row[static_cast<size_t>(at)];
    }
    return torch::tensor(out, torch::kLong).to(mb.device);
  }
  const int64_t offset = 13 * (mb.iteration * mb.batch_samples + x) + 29 * d;
  return (torch::arange(begin + shift, begin + shift + n, torch::TensorOptions(torch::kLong).device(mb.device)) * 7 +
          offset)
      .remainder(vocab);
}

// A 1-d convolution over each packed sequence (Whisper's and OFASys' audio
// stems): zero padding of kernel - 1 rows split around the sequence, stride s
// (a sequence of r rows gives ceil(r / s)), GELU, then learned positions.
// Written as a linear map of each window (unfold, then Dense) so that its
// weight gradient can wait for the W pass like every other matmul.
struct ConvImpl : torch::nn::Module {
  ConvImpl(const Layer& l, WeightGradDeferral* deferral, ComputeCopies* copies)
      : kernel(l.kernel), stride(l.stride), copies(copies) {
    proj = register_module("proj", Dense(l.in_channels * l.kernel, l.out_channels, true, deferral, copies));
    if (l.positions > 0)
      positions = register_parameter("positions", torch::randn({l.positions, l.out_channels}) * 0.02);
  }
  // x [rows, in_channels], one sequence -> [ceil(rows / stride), out_channels].
  torch::Tensor Sequence(const torch::Tensor& x) {
    const int64_t left = (kernel - 1) / 2;
    torch::Tensor windows = torch::constant_pad_nd(x, {0, 0, left, kernel - 1 - left}).unfold(0, kernel, stride);
    torch::Tensor y = torch::gelu(proj->forward(windows.reshape({windows.size(0), -1})));
    return positions.defined() ? AddPositions(y, copies->Of(positions)) : y;
  }
  // x [1, T, in_channels] packed (stride 1 inside a module: lengths are kept).
  torch::Tensor forward(const torch::Tensor& x, const std::vector<int64_t>& lengths) {
    std::vector<torch::Tensor> seqs;
    int64_t off = 0;
    for (int64_t len : lengths) {
      seqs.push_back(Sequence(x[0].slice(0, off, off + len)));
      off += len;
    }
    return torch::cat(seqs, 0).unsqueeze(0);
  }
  static torch::Tensor AddPositions(const torch::Tensor& seq, const torch::Tensor& table) {
    if (seq.size(0) > table.size(0)) {
      throw Error(
          fmt::format("runtime: a sequence of {} tokens exceeds the {} learned positions", seq.size(0), table.size(0)));
    }
    return seq + table.slice(0, 0, seq.size(0));
  }
  int64_t kernel, stride;
  ComputeCopies* copies;
  Dense proj{nullptr};
  torch::Tensor positions;
};
TORCH_MODULE(Conv);

// The rows of input module p.source that part `p` reads: [tokens, group x width]
// (a spatial merge hands on each group of rows as one token).
torch::Tensor InputRows(const ModuleTensors& in, const Part& p) {
  torch::Tensor rows = in.at(p.source)[0].slice(0, p.offset, p.offset + p.tokens * p.group);
  return p.group == 1 ? rows : rows.reshape({p.tokens, -1});
}

// The first layer of a module: its own data embedded and spliced with its
// input modules' tokens in packing order, plus learned positions. Its data:
//   text      token ids through the embedding table
//   patches   a patch embedding: each token's patch of in_channels x patch^2
//             x temporal_patch values (an image, a video's latent frames, an
//             audio spectrogram), a linear map (the conv with stride = kernel)
//   features  a conv stem: stride x tokens frames of in_channels features per
//             audio clip through ConvImpl
struct EmbedImpl : torch::nn::Module {
  enum class Data { kText, kPatches, kFeatures };
  // `tp`: a token table's split by vocabulary rows (TensorParallel); ignored by patches and features.
  EmbedImpl(const loom::Module& m, int module, const Layer& l, WeightGradDeferral* deferral, ComputeCopies* copies,
            const TensorParallel* tp)
      : module(module), vocab(l.vocab), copies(copies), tp(tp) {
    if (l.kind == LayerKind::kPatchEmbed) {
      data = Data::kPatches;
      values = l.in_channels * l.kernel * l.kernel * l.temporal_patch;
      proj = register_module("proj", Dense(values, l.hidden, l.bias, deferral, copies));
      patch = l.kernel;
      if (m.tokens.extra_tokens > 0) {
        extra = register_parameter("extra", torch::randn({m.tokens.extra_tokens, l.hidden}) * 0.02);
      }
    } else if (l.kind == LayerKind::kConv) {
      data = Data::kFeatures;
      values = l.in_channels;
      stride = l.stride;
      conv = register_module("conv", Conv(l, deferral, copies));
      return;  // the conv adds its own positions
    } else {
      // Drawn whole and cut, so that every TP degree starts from the reference's weights.
      const weights::SliceSpan rows = weights::SliceSpanOf(l.vocab, tp->rank, tp->size);
      first_id = rows.begin;
      table = register_parameter(
          "table", torch::randn({l.vocab, l.hidden}).slice(0, rows.begin, rows.begin + rows.length).clone());
    }
    if (l.positions > 0) positions = register_parameter("positions", torch::randn({l.positions, l.hidden}) * 0.02);
    if (l.final_norm != NormKind::kNone)
      norm = register_module("norm", Norm(l.final_norm, l.hidden, l.norm_eps, copies));
  }
  // Sample x's image `item` as patches into `out` ([rows, values], a slice
  // of the microbatch's one patch matrix): its real pixels, else synthetic
  // values. Written in place, as one matmul input: building each item's
  // patches and concatenating them held the items beside their concatenation
  // (tiny-omni's first stage: 1.05x its predicted peak at its first layer).
  void PatchesInto(int x, int item, torch::Tensor out, const MicrobatchInput& mb) const {
    if (!mb.images) return SyntheticInto(x, item, out, mb);
    const torch::Tensor pixels = mb.images->Of(x, item);
    const int64_t c = pixels.size(0), gh = pixels.size(1) / patch, gw = pixels.size(2) / patch;
    if (gh * gw != out.size(0) || c * patch * patch != values) {
      throw Error(
          fmt::format("runtime: sample {} image {}: its pixels make {} patches of {} values; the model's "
                      "patch embedding takes {} of {} (pixels of another image size or channel count?)",
                      x, item, gh * gw, c * patch * patch, out.size(0), values));
    }
    out.view({gh, gw, c, patch, patch}).copy_(PatchGrid(pixels, patch));
  }
  // Sample x's image or clip `item`: deterministic synthetic values in
  // [-1, 1] filling `out` (contiguous), made in place: one tensor of them, as
  // real pixels (a temporary per operation held 3-4 times a patch
  // embedding's input at once).
  void SyntheticInto(int x, int item, torch::Tensor out, const MicrobatchInput& mb) const {
    const double phase = 1.3 * static_cast<double>(13 * (mb.iteration * mb.batch_samples + x) + 7 * item);
    torch::Tensor flat = out.view({-1});
    at::arange_out(flat, flat.numel());
    flat.mul_(0.37).add_(phase).sin_();
  }
  // `rows` x `values` of them (a conv stem's frames).
  torch::Tensor Synthetic(int x, int item, int64_t rows, const MicrobatchInput& mb) const {
    torch::Tensor out = torch::empty({rows, values}, torch::TensorOptions(torch::kFloat).device(mb.device));
    SyntheticInto(x, item, out, mb);
    return out;
  }
  // Token ids through the table: under TP each rank looks up the ids its rows
  // hold, zeros for the others, and the group sums (Megatron's
  // VocabParallelEmbedding; its backward is the identity, each rank's rows
  // taking the gradient of the ids they hold).
  torch::Tensor Lookup(const torch::Tensor& ids) {
    if (tp->size == 1) return torch::embedding(copies->Of(table), ids);
    const int64_t rows = table.size(0);
    const torch::Tensor local = ids - first_id;
    const torch::Tensor held = (local >= 0) & (local < rows);
    const torch::Tensor x = torch::embedding(copies->Of(table), local.clamp(0, std::max<int64_t>(rows - 1, 0)))
                                .masked_fill(~held.unsqueeze(-1), 0);
    return ReduceFromTensorParallel::apply(x, AsInt(tp));
  }
  // The text parts' embeddings in packing order, from one lookup (one all-reduce under TP).
  std::vector<torch::Tensor> TextParts(const MicrobatchInput& mb) {
    std::vector<torch::Tensor> ids;
    std::vector<int64_t> sizes;
    for (const auto& s : mb.packing->modules[module]) {
      for (const Part& p : s.parts) {
        if (p.source >= 0) continue;
        ids.push_back(TextIds(s.sample, s.doc, p.offset, p.tokens, mb, vocab, 0));
        sizes.push_back(p.tokens);
      }
    }
    if (ids.empty()) return {};
    return Lookup(torch::cat(ids, 0)).split_with_sizes(sizes, 0);
  }
  // Every image's or clip's patch embeddings in packing order, from one
  // matmul: one weight gradient a microbatch, not one per item held side by
  // side until autograd sums them (tiny-omni's video patch embedding at TP 2
  // held two 196 KB gradients at once, 1.19x the stage's predicted peak).
  std::vector<torch::Tensor> PatchParts(const MicrobatchInput& mb) {
    std::vector<std::pair<int, int>> items;  // (sample, image or clip)
    std::vector<int64_t> sizes;
    const int64_t n_extra = extra.defined() ? extra.size(0) : 0;
    for (const auto& s : mb.packing->modules[module]) {
      const int item = s.image >= 0 ? s.image : s.clip;
      for (const Part& p : s.parts) {
        if (p.source >= 0) continue;
        items.push_back({s.sample, item});
        sizes.push_back(p.tokens - n_extra);
      }
    }
    if (items.empty()) return {};
    int64_t rows = 0;
    for (int64_t n : sizes) rows += n;
    torch::Tensor patches = torch::empty({rows, values}, torch::TensorOptions(torch::kFloat).device(mb.device));
    int64_t at = 0;
    for (size_t k = 0; k < items.size(); ++k) {
      PatchesInto(items[k].first, items[k].second, patches.narrow(0, at, sizes[k]), mb);
      at += sizes[k];
    }
    return proj->forward(patches).split_with_sizes(sizes, 0);
  }
  torch::Tensor forward(const ModuleTensors& in, const MicrobatchInput& mb) {
    std::vector<torch::Tensor> seqs;
    // Every part this layer embeds itself, in packing order, from one lookup or matmul.
    const std::vector<torch::Tensor> embedded = data == Data::kText      ? TextParts(mb)
                                                : data == Data::kPatches ? PatchParts(mb)
                                                                         : std::vector<torch::Tensor>{};
    size_t next = 0;  // into `embedded`
    for (const auto& s : mb.packing->modules[module]) {
      std::vector<torch::Tensor> parts;
      const int item = s.image >= 0 ? s.image : s.clip;
      for (const Part& p : s.parts) {
        if (p.source >= 0) {
          parts.push_back(InputRows(in, p));
        } else if (data == Data::kPatches) {
          const int64_t n_extra = extra.defined() ? extra.size(0) : 0;
          if (n_extra > 0) parts.push_back(copies->Of(extra));
          parts.push_back(embedded.at(next++));
        } else if (data == Data::kFeatures) {
          parts.push_back(conv->Sequence(Synthetic(s.sample, item, p.tokens * stride, mb)));
        } else {
          parts.push_back(embedded.at(next++));
        }
      }
      torch::Tensor seq = parts.size() == 1 ? parts[0] : torch::cat(parts, 0);
      seqs.push_back(positions.defined() ? ConvImpl::AddPositions(seq, copies->Of(positions)) : seq);
    }
    torch::Tensor out = torch::cat(seqs, 0).unsqueeze(0);
    return norm ? norm->forward(out) : out;
  }
  int module;
  int64_t vocab, values = 0, stride = 1, patch = 0;
  int64_t first_id = 0;  // the token id of the table's first row (TP: this rank's rows)
  ComputeCopies* copies;
  const TensorParallel* tp;
  Data data = Data::kText;
  Dense proj{nullptr};
  Conv conv{nullptr};
  Norm norm{nullptr};  // CLIP's pre_layrnorm
  torch::Tensor table, extra, positions;
};
TORCH_MODULE(Embed);

// A module whose first layer is not an embedding (a projector): its inputs' tokens spliced in packing order.
torch::Tensor Splice(const ModuleTensors& in, const MicrobatchInput& mb, int module) {
  std::vector<torch::Tensor> parts;
  for (const auto& s : mb.packing->modules[module]) {
    for (const Part& p : s.parts) parts.push_back(InputRows(in, p));
  }
  return torch::cat(parts, 0).unsqueeze(0);
}

struct HeadImpl : torch::nn::Module {
  // tied_table: the embedding's matrix in this stack (the gradients of both
  // uses add up in it), or null with `tied`: a copy of it drawn from the
  // embedding's seed, kept equal to it by summing the two gradients before
  // each optimizer step (Megatron's tied word embeddings across stages).
  // Under TP the matrix is this rank's vocabulary rows, as the embedding's
  // (SliceSpanOf): the logits are this rank's columns (a column-parallel
  // linear whose input passes Megatron's f), which the loss takes as they
  // are (cross_entropy.h VocabParallelCrossEntropy).
  HeadImpl(const Layer& l, WeightGradDeferral* deferral, ComputeCopies* copies, torch::Tensor* tied_table,
           uint64_t embedding_seed, const TensorParallel* tp)
      : deferral(deferral), copies(copies), tp(tp) {
    const weights::SliceSpan rows = weights::SliceSpanOf(l.vocab, tp->rank, tp->size);
    if (l.final_norm != NormKind::kNone) {
      norm = register_module("norm", Norm(l.final_norm, l.hidden, l.norm_eps, copies));
    }
    if (tied_table) {
      weight_slot = tied_table;
    } else if (l.tied) {
      torch::manual_seed(embedding_seed);
      copy = register_parameter("tied_table", torch::randn({l.vocab, l.hidden})
                                                  .slice(0, rows.begin, rows.begin + rows.length)
                                                  .clone());  // EmbedImpl's first draw
      weight_slot = &copy;
    } else {
      proj = register_module("proj", Dense(l.hidden, l.vocab, false, deferral, copies));
      if (tp->size > 1) proj->Shard(0, rows.begin, rows.begin + rows.length);
    }
  }
  // `rows` >= 0: `input` is this rank's rows of that many under sequence
  // parallelism, normed as they are and gathered for the matmul.
  torch::Tensor forward(const torch::Tensor& input, int64_t rows = -1) {
    torch::Tensor x = norm ? norm->forward(input, rows >= 0 ? tp : nullptr) : input;
    if (rows >= 0) {
      torch::Tensor* slot = proj ? &proj->weight : weight_slot;
      return GatheredMatmuls(copies->Cast(x), rows, {copies->Of(*slot)}, {slot}, deferral, tp, copies)[0];
    }
    if (tp->size > 1) x = CopyToTensorParallel::apply(x, AsInt(tp));
    if (proj) return proj->forward(x);
    return DeferrableMatmul::apply(copies->Cast(x), copies->Of(*weight_slot), AsInt(deferral), AsInt(weight_slot),
                                   AsInt(copies));
  }
  Norm norm{nullptr};  // the model's final norm (Llama's model.norm), before the logits
  WeightGradDeferral* deferral;
  ComputeCopies* copies;
  const TensorParallel* tp;
  torch::Tensor* weight_slot = nullptr;
  torch::Tensor copy;
  Dense proj{nullptr};
};
TORCH_MODULE(Head);

enum Kind { kEmbed, kBlock, kProjector, kHead, kConvLayer };

}  // namespace

void ApplyWeightGradients(std::vector<WeightGradDeferral::Pending>& pending) {
  torch::NoGradGuard no_grad;
  for (auto& p : pending) {
    const torch::Tensor input = p.gather_rows >= 0 ? GatherRows(p.input, p.gather_rows, *p.tp) : p.input;
    // In the compute dtype (bf16 under mixed precision), accumulated into the fp32 weight's gradient.
    torch::Tensor gw = p.grad_output.reshape({-1, p.grad_output.size(-1)})
                           .t()
                           .mm(input.reshape({-1, input.size(-1)}))
                           .to(p.weight.scalar_type());
    if (p.weight.grad().defined()) {
      p.weight.mutable_grad().add_(gw);
    } else {
      p.weight.mutable_grad() = gw;
    }
  }
  pending.clear();
}

LayerStackImpl::LayerStackImpl(const Model& model, const std::vector<LayerRange>& ranges, uint64_t seed,
                               const TensorParallel& tp, const ContextParallel& cp)
    : model_(&model),
      ranges_(ranges),
      deferral_(std::make_shared<WeightGradDeferral>()),
      copies_(std::make_shared<ComputeCopies>()),
      tp_(std::make_shared<TensorParallel>(tp)),
      cp_(std::make_shared<ContextParallel>(cp)) {
  CheckRunnable(model, ranges);
  torch::Tensor* table = nullptr;  // this stack's embedding matrix (a tied head's weights)
  int table_layer = -1;            // its layer's index in the stack
  for (const auto& r : ranges) {
    const int mi = model.FindModule(r.module);
    const loom::Module& m = model.modules[mi];
    for (int li = r.begin; li < r.end; ++li) {
      const Layer& l = m.layers[li];
      auto layer_seed = [&](int index) {
        return seed * 1000003 + static_cast<uint64_t>(mi) * 10007 + static_cast<uint64_t>(index);
      };
      torch::manual_seed(layer_seed(li));
      const std::string name = fmt::format("{}_{}", r.module, li);
      std::shared_ptr<torch::nn::Module> layer;
      int kind = kBlock;
      switch (l.kind) {
        case LayerKind::kEmbedding:
        case LayerKind::kPatchEmbed: {
          auto e = register_module(name, Embed(m, mi, l, deferral_.get(), copies_.get(), tp_.get()));
          if (l.kind == LayerKind::kEmbedding) {
            table_ = table = &e->table;
            table_layer = static_cast<int>(layers_.size());
            splits_[name + ".table"] = {0, l.vocab};
          }
          layer = e;
          kind = kEmbed;
          break;
        }
        case LayerKind::kLmHead: {
          auto h = register_module(
              name, Head(l, deferral_.get(), copies_.get(), l.tied ? table : nullptr, layer_seed(0), tp_.get()));
          if (h->copy.defined()) tied_copy_ = h->copy;
          if (l.tied && table != nullptr) tied_within_ = table_layer;
          if (h->proj) splits_[name + ".proj.weight"] = {0, l.vocab};
          if (h->copy.defined()) splits_[name + ".tied_table"] = {0, l.vocab};
          head_vocab_ = {l.vocab, weights::SliceSpanOf(l.vocab, tp.rank, tp.size).begin, tp_.get()};
          layer = h;
          kind = kHead;
          break;
        }
        case LayerKind::kMlpProjector:
          layer = register_module(name, Projector(l, deferral_.get(), copies_.get(), tp_.get()));
          splits_[name + ".fc1.weight"] = splits_[name + ".fc1.bias"] = {0, l.hidden};
          splits_[name + ".fc2.weight"] = {1, l.hidden};
          kind = kProjector;
          break;
        case LayerKind::kConv:
          if (li == 0) {  // a conv stem reads the module's audio
            layer = register_module(name, Embed(m, mi, l, deferral_.get(), copies_.get(), tp_.get()));
            kind = kEmbed;
          } else {
            layer = register_module(name, Conv(l, deferral_.get(), copies_.get()));
            kind = kConvLayer;
          }
          break;
        default:
          if (l.heads % tp.size != 0 || (l.kv_heads > 0 ? l.kv_heads : l.heads) % tp.size != 0 ||
              l.ffn_hidden % tp.size != 0) {
            throw Error(fmt::format("runtime: {} layer {}: {} heads, {} kv heads and ffn {} must divide by tp {}",
                                    r.module, li, l.heads, l.kv_heads, l.ffn_hidden, tp.size));
          }
          layer = register_module(name, Block(l, tp_.get(), cp_.get(), deferral_.get(), copies_.get()));
          break;
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

ModuleTensors LayerStackImpl::forward(ModuleTensors live, const MicrobatchInput& mb,
                                      const std::vector<Recompute>& recompute) {
  // Context parallelism (runtime/context_parallel.h): each module's tensor is
  // cut to this rank's rows as it enters the stage (or after the layer that
  // builds it whole), and gathered whole where another module reads it and at
  // the stage's end, except the loss module's logits (the loss sums over rows).
  const bool cp = cp_->size > 1;
  std::map<int, Layout> layouts;
  auto layout_of = [&](int module) {
    auto it = layouts.find(module);
    if (it == layouts.end()) {
      it = layouts.emplace(module, MakeAttentionLayout(*mb.packing, module, *cp_, mb.device, &model_->modules[module]))
               .first;
    }
    return it->second;
  };
  std::set<int> sliced;
  auto whole = [&](int module) {
    if (!sliced.count(module)) return;
    live[module] = GatherContext(live.at(module), layout_of(module), cp_.get());
    sliced.erase(module);
  };
  auto cut = [&](const torch::Tensor& x, int module) {
    if (!cp) return x;
    sliced.insert(module);
    return x.index_select(1, layout_of(module)->mine);
  };
  const int loss_module = static_cast<int>(model_->modules.size()) - 1;
  bool ends_loss_module = false;
  size_t i = 0;
  for (const auto& r : ranges_) {
    const int mi = model_->FindModule(r.module);
    if (mb.packing->Tokens(mi) == 0) {
      // Nothing of this module in the microbatch (samples without audio, say):
      // its layers do not run and it hands on no rows; its parameters get no
      // gradient from this microbatch, as in the reference. The hooks see
      // them all the same (their gathers are collectives).
      for (int li = r.begin; li < r.end; ++li, ++i) {
        if (hooks_) hooks_->BeforeForward(static_cast<int>(i));
        if (hooks_) hooks_->AfterForward(static_cast<int>(i));
      }
      live[mi] = torch::zeros({1, 0, OutputWidth(*model_, mi, r.end - 1)},
                              torch::TensorOptions().device(mb.device).dtype(copies_->dtype));
      continue;
    }
    torch::Tensor x;
    if (r.begin != 0) {
      x = cut(live.at(mi), mi);  // arrives whole from the previous stage
    } else {
      for (int p : model_->modules[mi].inputs) whole(p);
      if (kinds_[i] != kEmbed) x = cut(Splice(live, mb, mi), mi);
    }
    // Sequence parallelism (runtime/sequence_parallel.h): blocks read and
    // hand on this rank's rows; they are split entering the first and
    // gathered before any other layer (a head gathers them itself), unless
    // they arrive, or go on to the next stage, as this rank's rows already
    // (SetSequenceParallelRows).
    const bool first_range = &r == &ranges_.front(), last_range = &r == &ranges_.back();
    int64_t sp_rows = -1;  // the whole rows while x holds this rank's, else -1
    if (first_range && r.begin != 0 && sp_rows_in_) sp_rows = mb.packing->Tokens(mi);
    auto leave_sp = [&] {
      if (sp_rows >= 0) x = GatherFromSequenceParallel(x, sp_rows, tp_.get());
      sp_rows = -1;
    };
    for (int li = r.begin; li < r.end; ++li, ++i) {
      if (hooks_) hooks_->BeforeForward(static_cast<int>(i));
      if (kinds_[i] == kBlock && tp_->sequence_parallel && sp_rows < 0) {
        sp_rows = x.size(1);
        x = ScatterToSequenceParallel(x, tp_.get());
      } else if (kinds_[i] != kBlock && kinds_[i] != kHead) {
        leave_sp();
      }
      switch (kinds_[i]) {
        case kEmbed:
          x = cut(std::static_pointer_cast<EmbedImpl>(layers_[i])->forward(live, mb), mi);
          break;
        case kHead:
          x = std::static_pointer_cast<HeadImpl>(layers_[i])->forward(x, sp_rows);
          sp_rows = -1;
          break;
        case kProjector:
          x = std::static_pointer_cast<ProjectorImpl>(layers_[i])->forward(x);
          break;
        case kConvLayer: {  // a conv reads whole sequences: gathered from context parallel ranks first
          const bool was_cut = sliced.count(mi) > 0;
          if (was_cut) x = GatherContext(x, layout_of(mi), cp_.get());
          x = std::static_pointer_cast<ConvImpl>(layers_[i])->forward(x, mb.packing->Lengths(mi));
          if (was_cut) x = x.index_select(1, layout_of(mi)->mine);
          break;
        }
        default:
          x = std::static_pointer_cast<BlockImpl>(layers_[i])
                  ->forward(x, layout_of(mi), recompute.empty() ? Recompute::kNone : recompute.at(i));
          break;
      }
      if (hooks_) {
        hooks_->AfterForward(static_cast<int>(i));
        if (x.requires_grad()) x = BeforeLayerBackward::apply(x, AsInt(hooks_.get()), static_cast<int64_t>(i));
      }
    }
    if (!(last_range && sp_rows_out_)) {
      leave_sp();
    } else if (sp_rows < 0) {  // after the token embedding: split here, as Megatron's embedding does
      x = ScatterToSequenceParallel(x, tp_.get());
    }
    live[mi] = x;
    if (mi == loss_module && r.end == static_cast<int>(model_->modules[mi].layers.size())) ends_loss_module = true;
  }
  for (int m : std::vector<int>(sliced.begin(), sliced.end())) {
    if (!(m == loss_module && ends_loss_module)) whole(m);
  }
  return live;
}

void LayerStackImpl::HoldWeights(const std::vector<std::pair<torch::Tensor, torch::Tensor>>& held) {
  for (const auto& [p, w] : held) copies_->held[p.unsafeGetTensorImpl()] = w;
}

void LayerStackImpl::DropComputeCopies(const std::vector<torch::Tensor>& params) {
  for (const auto& p : params) copies_->copies.erase(p.unsafeGetTensorImpl());
}

std::vector<std::vector<torch::Tensor>> LayerStackImpl::LayerTrainableParameters() const {
  std::vector<std::vector<torch::Tensor>> out;
  for (const auto& layer : layers_) {
    auto& params = out.emplace_back();
    for (const auto& p : layer->parameters()) {
      if (p.requires_grad()) params.push_back(p);
    }
  }
  return out;
}

int LayerStackImpl::TensorParallelDim(const std::string& name) const {
  if (const auto it = splits_.find(name); it != splits_.end()) return it->second.dim;
  for (const char* column : {".q.", ".k.", ".v.", ".up.", ".gate."}) {
    if (name.find(column) != std::string::npos) return 0;
  }
  for (const char* row : {".o.weight", ".down.weight"}) {
    if (name.find(row) != std::string::npos) return 1;
  }
  return -1;
}

std::vector<int64_t> LayerStackImpl::WholeShape(const std::string& name, std::vector<int64_t> local) const {
  const int dim = tp_->size > 1 ? TensorParallelDim(name) : -1;
  if (dim < 0) return local;
  const auto split = splits_.find(name);
  local[dim] = split != splits_.end() ? split->second.whole : local[dim] * tp_->size;
  return local;
}

torch::Tensor TextTargets(const MicrobatchPacking& packing, const MicrobatchInput& mb, int64_t vocab) {
  std::vector<torch::Tensor> parts;
  for (const auto& s : packing.modules.back()) {
    for (const Part& p : s.parts) {
      // An input part in a token row (an image at its image tokens) is scored
      // there as transformers scores every position: its last row predicts
      // the text after the image.
      parts.push_back(p.source < 0 ? TextIds(s.sample, s.doc, p.offset, p.tokens, mb, vocab, 1)
                      : p.row >= 0
                          ? TextIds(s.sample, s.doc, p.row, p.tokens, mb, vocab, 1)
                          : torch::full({p.tokens}, -100, torch::TensorOptions(torch::kLong).device(mb.device)));
    }
  }
  // A microbatch without the loss module's tokens (a woven sub-microbatch of
  // images alone) targets nothing.
  if (parts.empty()) return torch::empty({0}, torch::TensorOptions(torch::kLong).device(mb.device));
  return torch::cat(parts, 0);
}

torch::Tensor TextLoss(const torch::Tensor& logits, const MicrobatchInput& mb, int64_t batch_text_tokens,
                       const std::vector<int64_t>& rows, const VocabShard& shard) {
  const int64_t width = logits.size(-1), vocab = shard.vocab > 0 ? shard.vocab : width;
  torch::Tensor targets = TextTargets(*mb.packing, mb, vocab);
  if (!rows.empty()) targets = targets.index_select(0, torch::tensor(rows, torch::kLong).to(targets.device()));
  // In fp32 whatever the compute dtype, as transformers' ForCausalLMLoss
  // upcasts the logits, a chunk of rows at a time (runtime/cross_entropy.h),
  // chunks of the whole vocabulary's rows under TP as well (what the memory
  // model prices: cost/layer_work.h LossChunkRows).
  const torch::Tensor flat = logits.reshape({-1, width});
  const torch::Tensor sum = shard.tp != nullptr && shard.tp->size > 1
                                ? VocabParallelCrossEntropy(flat, targets, shard.begin, shard.tp->rank, shard.tp->size,
                                                            shard.tp->all_reduce, LossChunkRows(vocab))
                                : SummedCrossEntropy(flat, targets, LossChunkRows(vocab));
  return sum / static_cast<double>(batch_text_tokens);
}

const torch::Tensor& ImagePixels::Of(int sample, int image) const {
  if (!pixels.empty()) return pixels.at(sample).at(image);
  auto it = read.find(sample);
  if (it == read.end()) {
    const weights::SafetensorsFile file(files.at(sample));
    const weights::TensorInfo& t = file.At("pixel_values");
    torch::ScalarType dtype = torch::kFloat;
    switch (t.dtype) {
      case weights::DType::kF32:
        break;
      case weights::DType::kBF16:
        dtype = torch::kBFloat16;
        break;
      case weights::DType::kF16:
        dtype = torch::kHalf;
        break;
      default:
        throw Error(
            fmt::format("{}: pixel_values is {}; expected F32, BF16 or F16", file.path(), weights::DTypeName(t.dtype)));
    }
    torch::Tensor host = torch::empty(t.shape, torch::TensorOptions(dtype));
    file.Read(t, std::span<std::byte>(static_cast<std::byte*>(host.data_ptr()), host.nbytes()));
    // A NaN here made the step's loss NaN, said as "training diverged" with no file (runtime audit R4-13).
    if (!torch::isfinite(host).all().item<bool>()) {
      throw Error(fmt::format("{}: pixel_values holds values that are not finite (nan or inf)", file.path()));
    }
    it = read.emplace(sample, host.to(torch::kFloat).unbind(0)).first;
  }
  return it->second.at(image);
}

std::unique_ptr<ImagePixels> RealImages(const Batch& batch) {
  auto out = std::make_unique<ImagePixels>();
  bool any = false;
  for (const Sample& s : batch.samples) {
    out->files.push_back(s.tokens ? s.tokens->pixel_values_file : "");
    any = any || !out->files.back().empty();
  }
  return any ? std::move(out) : nullptr;
}

torch::Tensor PatchGrid(const torch::Tensor& pixels, int64_t patch) {
  const int64_t c = pixels.size(0), gh = pixels.size(1) / patch, gw = pixels.size(2) / patch;
  return pixels.slice(1, 0, gh * patch)
      .slice(2, 0, gw * patch)
      .reshape({c, gh, patch, gw, patch})
      .permute({1, 3, 0, 2, 4});
}

torch::ScalarType ComputeDtype(Precision precision) {
  switch (precision) {
    case Precision::kBf16:
      return torch::kBFloat16;
    case Precision::kFp16:
      return torch::kHalf;
    case Precision::kTf32:
    case Precision::kFp32:
      return torch::kFloat;
  }
  return torch::kFloat;
}

torch::Tensor TowerLoss(const torch::Tensor& output, double batch_values) {
  return output.to(torch::kFloat).pow(2).sum() / batch_values;
}

void SetComputeThreads(int threads) {
  torch::set_num_threads(threads);
  using SetThreads = void (*)(int);
  if (auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(threads);
}

}  // namespace loom::runtime
