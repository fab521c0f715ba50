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

namespace loom::runtime {

// sum over rows r with targets[r] != -100 of -log_softmax(logits[r])[targets[r]],
// the softmax in fp32 whatever logits' dtype (fp32, bf16, fp16); a scalar fp32
// tensor whose backward gives logits their gradient in logits' dtype.
// logits [rows, vocab], targets [rows] (int64, each -100 or in [0, vocab)).
// Rows go through in chunks of `chunk_rows` (default, <= 0: cost/layer_work.h
// LossChunkRows(vocab), the chunk the memory model prices).
torch::Tensor SummedCrossEntropy(const torch::Tensor& logits, const torch::Tensor& targets, int64_t chunk_rows = 0);

}  // namespace loom::runtime
