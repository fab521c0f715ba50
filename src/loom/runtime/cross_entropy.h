// The language-model loss as transformers' ForCausalLMLoss computes it (fp32
// log-softmax over the vocabulary, the target's negative log-probability,
// -100 ignored), summed over rows, without the dense fp32 tensors of
// autograd's cross_entropy: the log-probabilities it keeps (4 B per token and
// vocabulary entry) and the two gradients its backward holds together (8 B).
// It keeps the logits themselves (in the compute dtype) and, per chunk of
// rows, makes the fp32 softmax only while it needs it; the backward writes
// the logits' gradient (softmax minus the one-hot target) straight into the
// compute dtype. What real trainers do to the same end: Megatron-LM's fused
// vocabulary-parallel cross-entropy, Liger's chunked loss.
// Torch types: include from runtime .cpp files and tests only.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>

namespace loom::runtime {

// sum over rows r with targets[r] != -100 of -log_softmax(logits[r])[targets[r]],
// the softmax in fp32 whatever logits' dtype (fp32, bf16, fp16); a scalar fp32
// tensor whose backward gives logits their gradient in logits' dtype.
// logits [rows, vocab], targets [rows] (int64, each -100 or in [0, vocab)).
// Rows go through in chunks of `chunk_rows` (default, <= 0: cost/layer_work.h
// LossChunkRows(vocab), the chunk the memory model prices).
torch::Tensor SummedCrossEntropy(const torch::Tensor& logits, const torch::Tensor& targets, int64_t chunk_rows = 0);

// The same sum where `logits` [rows, n] holds vocabulary entries [begin,
// begin + n) and the other ranks of a tensor-parallel group hold the rest
// (Megatron-LM's vocabulary-parallel cross-entropy): rank `rank` of `ranks`,
// `all_reduce` summing a tensor over the group in place. Every rank returns
// the whole sum; each backward gives its own logits their gradient, with no
// communication. targets: whole-vocabulary ids (or -100), the same on every
// rank. The forward makes one all-reduce of (ranks + 1) x rows fp32 values:
// each rank's log-sum-exp over its entries and the target's logit where it
// holds it (Megatron reduces a max, a sum of exponentials and the target
// logit in three; a log-sum-exp per rank needs no max and one call).
torch::Tensor VocabParallelCrossEntropy(const torch::Tensor& logits, const torch::Tensor& targets, int64_t begin,
                                        int rank, int ranks, const std::function<void(torch::Tensor&)>& all_reduce,
                                        int64_t chunk_rows);

}  // namespace loom::runtime
