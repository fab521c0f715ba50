// Megatron-LM's sequence parallelism (Korthikanti et al. 2022, "Reducing
// Activation Recomputation in Large Transformer Models", §4.2.2) inside a
// tensor-parallel group: between the column- and row-parallel matmuls of a
// transformer layer (the norms, the residual adds) each TP rank holds only
// its share of the sequence's rows instead of every row. A packed activation
// [1, T, width] is split along T: rank r holds rows weights::SliceSpanOf(T,
// r, size) (uneven by a row where TP does not divide T; Megatron requires
// that it divide). Where Megatron's f and g operators all-reduce, these
// all-gather the rows before a column-parallel matmul and reduce-scatter the
// row-parallel partial sums after one: the same bytes moved, and the norms'
// and residuals' activations (4h of a layer's per-token bytes) split by TP,
// as cost/layer_work.h ActivationBytes prices them with sequence_parallel.
//
// The column-parallel matmuls keep this rank's rows of their input, not the
// gathered rows, and gather again in the backward (Megatron's
// LinearWithGradAccumulationAndAsyncCommunication does the same): without
// that a layer would keep the gathered norm outputs whole.
//
// Reduce-scatter is an all-to-all of each rank's rows plus a local sum (the
// volume of a ring reduce-scatter; c10d_calls.h ReduceScatterAsync).
// Torch types: runtime translation units and tests only.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "loom/runtime/torch_model.h"

namespace loom::runtime {

// This rank's rows of a whole packed tensor [1, T, width] (a view).
torch::Tensor LocalRows(const torch::Tensor& whole, const TensorParallel& tp);

// Every rank's rows [1, t_r, width] joined in rank order: [1, total, width].
// No autograd: the operators below call it.
torch::Tensor GatherRows(const torch::Tensor& local, int64_t total, const TensorParallel& tp);

// The sum over the group of `partial` [1, T, width], this rank's rows of it.
// No autograd.
torch::Tensor ReduceScatterRows(const torch::Tensor& partial, const TensorParallel& tp);

// Into the sequence-parallel region from a tensor every rank holds whole (an
// embedding's output, a stage's input): forward this rank's rows, backward
// every rank's gradient rows gathered (Megatron's
// scatter_to_sequence_parallel_region).
torch::Tensor ScatterToSequenceParallel(const torch::Tensor& whole, const TensorParallel* tp);

// Out of it, to a layer every rank runs whole (a head of another module, a
// stage's output): forward the rows gathered, backward this rank's rows of
// the gradient, which every rank computed whole alike.
torch::Tensor GatherFromSequenceParallel(const torch::Tensor& local, int64_t total, const TensorParallel* tp);

// After a row-parallel matmul: forward the partial sums reduce-scattered to
// this rank's rows, backward the gradient's rows gathered.
torch::Tensor ReduceScatterToSequenceParallel(const torch::Tensor& partial, const TensorParallel* tp);

// Column-parallel matmuls of one input: `local` [1, t, in] (this rank's rows)
// gathered to [1, total, in], times each of `weights` (1 to 3, [out_i, in],
// the compute-dtype copies of the parameters in `slots`, from `copies`); returns x W_i^T for
// each. Keeps `local` only and gathers it again in the backward, which
// reduce-scatters the input's gradient; weight gradients go to the slots'
// parameters, or wait for the W pass where `deferral` is active.
std::vector<torch::Tensor> GatheredMatmuls(const torch::Tensor& local, int64_t total,
                                           const std::vector<torch::Tensor>& weights,
                                           const std::vector<torch::Tensor*>& slots, WeightGradDeferral* deferral,
                                           const TensorParallel* tp, const ComputeCopies* copies);

}  // namespace loom::runtime
