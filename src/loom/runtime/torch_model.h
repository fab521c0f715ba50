// libtorch modules for Loom's layers and the synthetic data the runtime trains
// on. Only runtime translation units (and the runtime tests and bench) include
// this header: it pulls in torch/torch.h, which is slow to compile.
//
// Layers (what the runtime can build; others are a loom::Error naming them):
//   patch_embed   an image's, a video's latent frames' or an audio
//                 spectrogram's patches (in_channels x patch^2 x temporal_patch
//                 values each) -> linear to hidden, the module's extra tokens
//                 (CLS) first, plus learned positions
//   conv (1-d)    first layer: an audio clip's stride x tokens frames of
//                 in_channels features; later: the sequence (stride 1); zero
//                 padding of kernel - 1 split around each sequence, GELU,
//                 learned positions
// Synthetic data: row r, value c of sample x's image or clip i at iteration t
// (global batch B) is sin(0.37 (r values + c) + 1.3 (13 (t B + x) + 7 i)).
//   embedding     token ids -> hidden (+ learned positions); in a text+inputs
//                 module it also splices the input modules' tokens in front
//                 of each document's text (runtime/packing.h); under TP
//                 each shard holds its vocabulary rows (TensorParallel)
//   transformer   pre-norm (LayerNorm or RMSNorm) attention with grouped-query
//                 heads (optional biases, Qwen3's Q/K norms, RoPE; fused:
//                 runtime/attention.h), a causal or bidirectional mask inside
//                 each packed sequence, then a gated or plain MLP
//                 (runtime/layer_ops.h), both residual
//   mlp_projector linear, GELU, linear (with biases)
//   lm_head       hidden -> logits; tied: the embedding's matrix (in another
//                 stage: a copy whose gradient the worker sums with it);
//                 under TP this shard's vocabulary columns of the logits
// Activations are packed: [1, tokens, width] per module (runtime/packing.h).
// Frozen layers' parameters do not require gradients. Every layer's initial
// weights are drawn from its own seed (the model's seed, its module and layer
// index), so a stage built on any rank starts from the weights the
// single-process reference starts from.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "loom/plan/plan.h"
#include "loom/runtime/compute_copies.h"
#include "loom/runtime/context_parallel.h"
#include "loom/runtime/packing.h"
#include "loom/spec/model.h"
#include "loom/spec/precision.h"

namespace loom::runtime {

// Megatron tensor parallelism inside a transformer layer: this process is
// shard `rank` of `size`. Q/K/V and the MLP's up/gate projections are split by
// output (column parallel), the attention output and down projections by input
// (row parallel); `all_reduce` sums a tensor over the TP group (the forward
// after each row-parallel projection, the backward of each block input).
// An MLP projector is split as an MLP (by its hidden units). A token
// embedding's table and the LM head are split by vocabulary rows
// (Megatron's VocabParallelEmbedding and vocabulary-parallel loss; the rows
// of shard r are weights::SliceSpanOf(vocab, r, size), so a vocabulary that
// TP does not divide splits unevenly rather than being padded). Norms and
// patch embeddings are replicated. size 1: no TP.
// With `sequence_parallel` (Megatron's sequence parallelism,
// runtime/sequence_parallel.h) the rows between the matmuls are split over
// the group too, and `all_gather` and `all_to_all` move them: every member's
// `mine` (equal sizes) into `all` [size x mine.numel()] in member order; `in`
// [size x chunk] sent chunk i to member i, `out` [size x chunk] what each
// member sent this one, in member order.
struct TensorParallel {
  int rank = 0;
  int size = 1;
  std::function<void(torch::Tensor&)> all_reduce;
  bool sequence_parallel = false;
  std::function<void(const torch::Tensor& mine, torch::Tensor& all)> all_gather;
  std::function<void(torch::Tensor& in, torch::Tensor& out)> all_to_all;
};

// The vocabulary entries a stack's LM head computes logits for: [begin,
// begin + the logits' width) of `vocab`, the rest on the other ranks of `tp`
// (null or size 1: all of them).
struct VocabShard {
  int64_t vocab = 0;
  int64_t begin = 0;
  const TensorParallel* tp = nullptr;
};

// Zero-bubble's split backward (ZB-H1, PipeWeaver): while `active`, the
// backward of every linear layer computes its input gradient only and queues
// what its weight gradient needs; ApplyWeightGradients computes those later
// (the W pass). Norm, embedding and position weights take their gradients in
// the input pass (they are small). Owned by one LayerStack.
// Under sequence parallelism a pending input is this rank's rows of
// `gather_rows`, gathered over `tp` when the W pass runs
// (runtime/sequence_parallel.h GatheredMatmuls), so the rows wait split.
// Pending tensors are detached: a saved input's grad_fn would keep B's graph
// alive until W, and with it, under full recomputation, the recomputed
// block's input leaf and its gradient (one [tokens, hidden] more a layer,
// ActivationMemory.BetweenZeroBubblesBAndWALayerHoldsWhatTheMemoryModelPrices).
struct WeightGradDeferral {
  struct Pending {
    torch::Tensor weight, input, grad_output;
    int64_t gather_rows = -1;
    const TensorParallel* tp = nullptr;
  };
  bool active = false;
  std::vector<Pending> pending;
};
// weight.grad += grad_output^T input for each queued linear, in queue order.
void ApplyWeightGradients(std::vector<WeightGradDeferral::Pending>& pending);

// What the layers compute in under a workload's precision: bf16, fp16, else
// fp32 (tf32 is fp32 with TF32 matmuls on a GPU, set apart from the dtype;
// compute_copies.h says how parameters reach it).
torch::ScalarType ComputeDtype(Precision precision);

// Real text (the parity tests; `loom run --data`): per sample, per document,
// its token ids and its labels (-100: not scored), both of the document's
// text length. The target of position p is labels[p + 1], transformers'
// shift (the last position scores nothing).
struct TextTokens {
  std::vector<std::vector<std::vector<int64_t>>> ids, labels;  // [sample][document][position]
};

// A batch's real images: per sample, per image, its pixels [channels, height,
// width] as the model's image processor makes them (transformers'
// `pixel_values`: resized, cropped and normalised). Either given, or read on
// first use from each sample's pixel_values file (SampleTokens).
struct ImagePixels {
  std::vector<std::vector<torch::Tensor>> pixels;  // [sample][image]; empty: read from `files`
  std::vector<std::string> files;                  // [sample]
  const torch::Tensor& Of(int sample, int image) const;
  mutable std::map<int, std::vector<torch::Tensor>> read;  // sample -> its file's images, as float
};
// The batch's images where its samples carry pixel_values files, else null.
std::unique_ptr<ImagePixels> RealImages(const Batch& batch);

// What a stage's forward reads besides its input tensors: the microbatch's
// packing and what seeds its synthetic data.
struct MicrobatchInput {
  const MicrobatchPacking* packing = nullptr;
  int64_t iteration = 0;
  int64_t batch_samples = 1;           // samples in the global batch (the data seeds)
  torch::Device device = torch::kCPU;  // where the data is made
  const TextTokens* text = nullptr;    // real text; null: the synthetic text (TextTargets)
  const ImagePixels* images = nullptr;  // real pixels; null: synthetic patches
};

// The patches of one image [channels, height, width] as a view [rows, columns,
// channels, patch, patch]: row by row over the image, each patch in the
// order of a Conv2d weight's [channels, patch, patch], what a conv of kernel =
// stride = patch multiplies. A remainder past a multiple of the patch is
// dropped, as the conv drops it.
torch::Tensor PatchGrid(const torch::Tensor& pixels, int64_t patch);

// Per module index, its packed activation [1, tokens, width] (runtime/packing.h).
using ModuleTensors = std::map<int, torch::Tensor>;

// Calls around each layer of a stack (by its index in the stack), for ZeRO-3
// to gather and release one layer's weights at a time as FSDP does per unit
// (runtime/fsdp_layers.h). The forward calls BeforeForward and AfterForward
// for every layer in stack order, also for a module's layers that do not run
// (no tokens of it in the microbatch), so that every data-parallel replica
// makes the same calls; BeforeBackward runs when the gradient of the layer's
// output arrives, before the layer's own backward.
class LayerHooks {
 public:
  virtual ~LayerHooks() = default;
  virtual void BeforeForward(int layer) = 0;
  virtual void AfterForward(int layer) = 0;
  virtual void BeforeBackward(int layer) = 0;
};

class LayerStackImpl : public torch::nn::Module {
 public:
  LayerStackImpl(const Model& model, const std::vector<LayerRange>& layers, uint64_t seed,
                 const TensorParallel& tp = {}, const ContextParallel& cp = {});
  // Runs the stack's layers on `in` (the tensors crossing into the stage;
  // empty for the first) and returns, per module touched, its tensor after
  // the stack's last layer of it, plus the inputs passed through unchanged.
  // `recompute`: per layer of the stack, its activation checkpointing (empty: none).
  // With context parallelism every tensor returned is whole except the loss
  // module's logits when the stack ends it: this rank's rows (ContextRows).
  ModuleTensors forward(ModuleTensors in, const MicrobatchInput& mb, const std::vector<Recompute>& recompute = {});
  WeightGradDeferral& deferral() { return *deferral_; }
  // The dtype the layers compute in (ComputeCopies; default kFloat), and
  // dropping the parameters' copies: after every change of the weights (the
  // optimizer step) and where a stage's weights are released (ZeRO-3).
  void SetComputeDtype(torch::ScalarType dtype) { copies_->dtype = dtype; }
  torch::ScalarType compute_dtype() const { return copies_->dtype; }
  void ClearComputeCopies() { copies_->copies.clear(); }
  // Weights held in the compute dtype in place of these parameters' fp32
  // values, for the run (ZeRO-1/2 under mixed precision: compute_copies.h).
  void HoldWeights(const std::vector<std::pair<torch::Tensor, torch::Tensor>>& held);
  // Drops the copies of these parameters only (ZeRO-3 after a layer's forward).
  void DropComputeCopies(const std::vector<torch::Tensor>& params);
  // Each layer's trainable parameters, in stack order (empty for a frozen layer).
  std::vector<std::vector<torch::Tensor>> LayerTrainableParameters() const;
  int num_layers() const { return static_cast<int>(layers_.size()); }
  // The stack's embedding layer whose matrix a head of the same stack reads
  // too (tied word embeddings within a stage), or -1.
  int TiedWithin() const { return tied_within_; }
  // Under sequence parallelism, whether the stack's first layer receives, and
  // its last layer hands on, this TP rank's rows of the sequence rather than
  // every row (plan/sequence_parallel_handoff.h: Megatron's pipeline sends
  // them so). Default: every row both ways.
  void SetSequenceParallelRows(bool rows_in, bool rows_out) {
    sp_rows_in_ = rows_in;
    sp_rows_out_ = rows_out;
  }
  // Calls around each layer from now on (null: none). The hooks must outlive
  // every graph the stack builds.
  void SetLayerHooks(std::shared_ptr<LayerHooks> hooks) { hooks_ = std::move(hooks); }
  // The parameters TP splits (their statistics are summed over shards).
  bool IsSharded(const std::string& parameter_name) const { return tp_->size > 1 && TensorParallelDim(parameter_name) >= 0; }
  // How TP splits a stack parameter ("llm_3.q.weight"): 0, by rows
  // (column-parallel weights and their biases: q, k, v, up, gate, a
  // projector's fc1; a token embedding's table, the LM head's matrix or tied
  // copy); 1, by columns (row-parallel weights: o, down, a projector's fc2;
  // their biases stay whole); -1, whole.
  int TensorParallelDim(const std::string& parameter_name) const;
  // A parameter's shape in the whole model from this shard's `local` one.
  std::vector<int64_t> WholeShape(const std::string& parameter_name, std::vector<int64_t> local) const;
  // The loss module's vocabulary as this stack's LM head holds it.
  VocabShard HeadVocab() const { return head_vocab_; }
  // Tied word embeddings across stages: the embedding matrix of a stack whose
  // module's head lies elsewhere, and a tied head's copy of it (undefined if none).
  torch::Tensor EmbeddingTable() const { return table_ ? *table_ : torch::Tensor(); }
  torch::Tensor TiedHeadCopy() const { return tied_copy_; }

 private:
  const Model* model_;
  std::vector<LayerRange> ranges_;
  std::vector<std::shared_ptr<torch::nn::Module>> layers_;  // in range order
  std::vector<int> kinds_;
  std::shared_ptr<WeightGradDeferral> deferral_;
  std::shared_ptr<ComputeCopies> copies_;
  std::shared_ptr<TensorParallel> tp_;
  std::shared_ptr<ContextParallel> cp_;
  torch::Tensor* table_ = nullptr;
  torch::Tensor tied_copy_;
  std::shared_ptr<LayerHooks> hooks_;
  bool sp_rows_in_ = false, sp_rows_out_ = false;  // SetSequenceParallelRows
  int tied_within_ = -1;
  // Parameters split over TP by weights::SliceSpanOf (a vocabulary's rows, a
  // projector's hidden units): the dimension, and its whole extent. (A
  // transformer layer's split, always even, is TensorParallelDim's by name.)
  struct Split {
    int dim;
    int64_t whole;
  };
  std::map<std::string, Split> splits_;
  VocabShard head_vocab_;
};
TORCH_MODULE(LayerStack);

// The loss module's next-token targets over its packed tokens: the text
// sequence of sample x's document d at iteration i is the arithmetic sequence
// t_p = (7 p + 13 (i G + x) + 29 d) mod vocab and each position targets the
// next term; tokens spliced in from other modules (images) target nothing (-100).
torch::Tensor TextTargets(const MicrobatchPacking& packing, const MicrobatchInput& mb, int64_t vocab);

// Sum of the microbatch's per-token cross-entropy over `batch_text_tokens`
// (runtime/packing.h BatchTextTokens): summed over all microbatches and
// replicas, the mean next-token loss of the global batch.
// `rows`: the packed rows `logits` holds (context parallelism: this rank's
// ContextRows; empty: all), whose targets it is scored on. `vocab`: the
// entries `logits` holds (LayerStackImpl::HeadVocab; default: all of them).
torch::Tensor TextLoss(const torch::Tensor& logits, const MicrobatchInput& mb, int64_t batch_text_tokens,
                       const std::vector<int64_t>& rows = {}, const VocabShard& vocab = {});

// A tower's surrogate loss (process_layout.h TowerEnds): the sum of squares of
// its output rows over `batch_values` (its tokens in the global batch times its
// width): summed over every microbatch, the batch's mean square activation. It
// stands in for an objective across towers (CLIP's contrastive loss), which
// the runtime does not compute, so that the tower trains and runs its backward.
torch::Tensor TowerLoss(const torch::Tensor& output, double batch_values);

// This process's compute threads: libtorch's intra-op pool (which also sizes
// MKL's, the BLAS of PyPI's libtorch) and OpenBLAS's own where a libtorch runs
// its GEMMs on OpenBLAS (Debian's 1.13 did; torch::set_num_threads does not
// size that pool, and at its default of one thread per core several ranks on
// the 2-core machine spun in sched_yield against each other, 10x slower steps).
void SetComputeThreads(int threads);

}  // namespace loom::runtime
