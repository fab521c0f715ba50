// A checkpoint saved by several processes at once (`loom run --save DIR`):
// each process writes the tensors it holds to a part file of its own, a
// tensor-parallel slice marked with which slice it is, and the launcher joins
// the parts into the one checkpoint transformers reads (checkpoint_weights.h).
// No worker ever holds the whole model; the launcher joins bytes (torch-free)
// and holds the joined model once while it writes it.
//
// A part file is a safetensors file. A sliced tensor's entry in its
// `__metadata__` is "loom.slice.NAME" -> "DIM/INDEX/COUNT": slice INDEX of
// COUNT along DIM (TP's split, runtime/torch_model.h TensorParallelDim), the
// balanced split SliceSpanOf makes (equal slices where COUNT divides the
// dimension, as TP's heads and MLP columns always do; a vocabulary of 50257
// entries split 2 ways is 25128 + 25129 rows). A tensor without that entry is whole.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "loom/weights/safetensors.h"

namespace loom::weights {

struct SliceOf {
  int dim = 0;
  int index = 0;
  int count = 1;
};

// Where slice `index` of `count` lies along a dimension of `whole` entries:
// [whole * index / count, whole * (index + 1) / count), sizes differing by at
// most one. Megatron-LM pads the vocabulary to a multiple of TP instead; Loom
// keeps Hugging Face's shapes, so that a slice is rows of the checkpoint's
// own tensor and nothing is added to the model.
struct SliceSpan {
  int64_t begin = 0, length = 0;
};
SliceSpan SliceSpanOf(int64_t whole, int index, int count);

// Writes one process's part (atomically, WriteSafetensors); `slices` marks
// the tensors of `tensors` that are slices.
void WriteCheckpointPart(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, SliceOf>& slices);

// Joins `parts` into `out_dir` with WriteCheckpointWeights (one file up to
// `max_shard_bytes`, else shards and an index). A whole tensor may come from
// several parts (replicas that hold the same layer) if their bytes agree.
// Throws loom::Error naming the part file and the tensor: a slice missing or
// given twice, slices that disagree on dtype, count or shape beside their
// dimension, a tensor both whole and sliced, copies that differ, a malformed
// slice entry. Returns the names written, sorted.
std::vector<std::string> AssembleCheckpoint(const std::vector<std::string>& parts, const std::string& out_dir,
                                            uint64_t max_shard_bytes);

}  // namespace loom::weights
