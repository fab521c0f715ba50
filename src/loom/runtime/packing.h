// How the runtime lays out one microbatch: every module's tokens packed into
// one row, sequence after sequence, in an order every rank derives from the
// samples alone (so a receiver knows the shape of what it receives, and the
// single-process reference packs the same way). No torch in this header.
//
// Packing order, per module (the simulator's token rules, cost/token_stats.h):
//   text            per sample, per document: its text tokens
//   image           per sample, per image: the image's patch tokens (extra
//                   tokens such as CLS first)
//   video, audio    per sample, per clip: the clip's tokens (VideoTokens,
//                   AudioTokens in cost/token_stats.h)
//   inputs          per sample, per input module in order: that module's
//                   sequences of the sample (a projector: same lengths)
//   text+inputs     per sample, per document: the input modules' sequences of
//                   the document (in input order), then its text tokens; one
//                   sequence per document (an LLM over interleaved data). A
//                   sample with token ids and images (SampleTokens) instead
//                   puts each image's sequence at its run of image tokens,
//                   text between (transformers' masked_scatter)
// Sequences never attend to each other (documents are masked apart, as the
// simulator's sum of squared lengths assumes).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "loom/data/sample.h"
#include "loom/plan/execution_plan.h"
#include "loom/plan/plan.h"
#include "loom/spec/model.h"

namespace loom::runtime {

// A contiguous run of a sequence's tokens: from input module `source`'s packed
// output at `offset`, or the module's own data (source -1: text ids, pixels,
// frames or audio features). A source with a spatial merge (TokenRule::merge
// m > 1, Qwen2-VL's patch merger) hands on each `group` = m^2 consecutive rows
// as one token of `group` times its width: the part reads tokens x group rows
// from `offset` (the encoder's patch order puts each m x m block together).
struct Part {
  int source = -1;
  int64_t offset = 0;
  int64_t tokens = 0;
  int64_t group = 1;
  // Where an input part sits in its document's token row: a sample with real
  // token ids and images, whose image tokens it takes the place of (its
  // positions are scored as transformers scores them); -1: nowhere.
  int64_t row = -1;
};

struct PackedSequence {
  int sample = 0;  // index into the batch
  int doc = 0;     // the sample's document
  int image = -1;  // the sample's image (image sequences), else -1
  int64_t tokens = 0;
  std::vector<Part> parts;  // in order; their tokens sum to `tokens`
  int clip = -1;            // the sample's video or audio clip (video and audio sequences), else -1
};

struct MicrobatchPacking {
  std::vector<std::vector<PackedSequence>> modules;  // per model module, its sequences in packing order
  int64_t Tokens(int module) const;
  std::vector<int64_t> Lengths(int module) const;
  int64_t TextTokens() const;  // text tokens of the loss module (the last one)
};

// Throws loom::Error if a module's token rule is one the runtime cannot pack
// (fixed-count or pooled image tokens, a merge of images with extra tokens,
// projector downsampling).
MicrobatchPacking PackMicrobatch(const Model& model, const Batch& batch, const std::vector<int>& samples);
// The same for sample pieces (plan/execution_plan.h): a whole sample, or one
// image of it (PipeWeaver's encoder sub-microbatches), which only the modules
// that see images and their projectors see; modules of text get no sequences
// from it. Pieces pack in the order given.
MicrobatchPacking PackMicrobatch(const Model& model, const Batch& batch, std::span<const SamplePiece> pieces);

// Text tokens of the whole batch: the loss is the sum of per-token losses over
// the batch divided by this, so it does not depend on how samples are grouped
// into microbatches or replicas.
int64_t BatchTextTokens(const Batch& batch);

// Rows of `source` that become one token of its consumers (Part::group): m^2
// for an image or video module merging m x m, else 1.
int64_t MergeGroup(const Module& source);

// Width of what layer `layer` of `module` hands on (hidden, out_channels, out_dim or vocab).
int64_t OutputWidth(const Model& model, int module, int layer);

// The tensors that cross a stage boundary: after the producer's last layer
// range `last`, the partial output of its module (if unfinished) and every
// finished module's output that a later module still reads; ascending by module.
struct BoundaryTensor {
  int module = 0;
  int64_t width = 0;
};
std::vector<BoundaryTensor> CrossingAfter(const Model& model, const LayerRange& last);

}  // namespace loom::runtime
