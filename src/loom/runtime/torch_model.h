// libtorch modules for Loom's layers and the synthetic text data the runtime
// trains on. Only runtime translation units (and the runtime tests) include
// this header: it pulls in torch/torch.h, which is slow to compile.
//
// Layers (what the runtime can build; others are a loom::Error naming them):
//   embedding     token ids [n, s] -> [n, s, h]
//   transformer   pre-norm (LayerNorm) attention with grouped-query heads and a
//                 causal or bidirectional mask, then a gated (SiLU) or plain
//                 (GELU) MLP, both residual; no biases (like the zoo's LLMs)
//   lm_head       untied [n, s, h] -> logits [n, s, vocab]
// Frozen layers' parameters do not require gradients. Every layer's initial
// weights are drawn from its own seed (the model's seed,
// its module and layer index), so a stage built on any rank starts from the
// weights the single-process reference starts from.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "loom/data/sample.h"
#include "loom/plan/plan.h"
#include "loom/spec/model.h"

namespace loom::runtime {

// Megatron tensor parallelism inside a transformer layer: this process is
// shard `rank` of `size`. Q/K/V and the MLP's up/gate projections are split by
// output (column parallel), the attention output and down projections by input
// (row parallel); `all_reduce` sums a tensor over the TP group (the forward
// after each row-parallel projection, the backward of each block input).
// Embeddings, norms and the LM head are replicated. size 1: no TP.
struct TensorParallel {
  int rank = 0;
  int size = 1;
  std::function<void(torch::Tensor&)> all_reduce;
};

class LayerStackImpl : public torch::nn::Module {
 public:
  LayerStackImpl(const Model& model, const std::vector<LayerRange>& layers, uint64_t seed,
                 const TensorParallel& tp = {});
  torch::Tensor forward(torch::Tensor x);

 private:
  std::vector<std::shared_ptr<torch::nn::Module>> layers_;
  std::vector<int> kinds_;
};
TORCH_MODULE(LayerStack);

// Throws loom::Error naming the first layer kind (or feature) the runtime cannot build.
void CheckRunnable(const Model& model, const std::vector<LayerRange>& layers);

// Synthetic next-token data: sample x of iteration i is the arithmetic sequence
// t_p = (7 p + 13 (i G + x)) mod vocab over its text tokens; the target of each
// position is the next term. Learnable, deterministic, the same on every rank.
torch::Tensor TokenIds(const Batch& batch, const std::vector<int>& samples, int64_t iteration, int64_t vocab,
                       bool targets);

}  // namespace loom::runtime
