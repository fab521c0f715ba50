// TokenStats: the sufficient statistics of a set of sequences for costing a
// layer. Linear work scales with `tokens`, self-attention with `sum_sq`
// (sequences packed together do not attend to each other), cross-attention
// with `cross` (per document: query tokens x context tokens). All fields add
// up across samples, so the cost of a microbatch is the cost of the sum.
// A module with bitfield attention (Cornstarch, Module::bitfield_attention)
// also counts `mask_pairs`, the (query, key) pairs its mask allows; its
// attention is priced by those instead of sum_sq and the layer's causality.
#pragma once

#include <vector>

#include "loom/data/attention_mask.h"
#include "loom/data/sample.h"
#include "loom/spec/model.h"

namespace loom {

struct TokenStats {
  double tokens = 0;          // sum of sequence lengths
  double sum_sq = 0;          // sum of squared sequence lengths
  double sequences = 0;       // number of sequences
  double context_tokens = 0;  // cross-attention context tokens (K/V side)
  double cross = 0;           // sum over documents of query tokens x context tokens
  double mask_pairs = 0;      // bitfield modules only: pairs the mask allows (0: none counted)

  // Query-key pairs self-attention computes: the mask's, else every pair of
  // each sequence, or (causal) half of them.
  double AttentionPairs(bool causal) const { return mask_pairs > 0 ? mask_pairs : (causal ? sum_sq / 2 : sum_sq); }

  // Every statistic times `f` (a share of a batch: a mean microbatch, a sample's share).
  TokenStats& operator*=(double f) {
    tokens *= f;
    sum_sq *= f;
    mask_pairs *= f;
    sequences *= f;
    context_tokens *= f;
    cross *= f;
    return *this;
  }

  TokenStats& operator+=(const TokenStats& o) {
    tokens += o.tokens;
    sum_sq += o.sum_sq;
    mask_pairs += o.mask_pairs;
    sequences += o.sequences;
    context_tokens += o.context_tokens;
    cross += o.cross;
    return *this;
  }
  // The statistics seen by a U-Net level working at 1/divisor of the resolution.
  TokenStats Downscaled(double spatial_divisor) const;
};

// Tokens one image of w x h pixels becomes in a module with rule `r`, before
// the module's spatial merge (what the module's own layers process).
int64_t ImageTokens(const TokenRule& r, int64_t width_px, int64_t height_px);
// Tokens of one video clip: ImageTokens per latent frame (frames_per_token
// frames each, the last one padded).
int64_t VideoTokens(const TokenRule& r, int64_t frames, int64_t width_px, int64_t height_px);
// Tokens of an audio clip of `seconds`: the module's frame rate, rounded up.
int64_t AudioTokens(const TokenRule& r, double seconds);

// Per module of `model` (same indices), the token statistics of one sample,
// following each module's TokenRule through the DAG in topological order.
std::vector<TokenStats> CountModuleTokens(const Model& model, const Sample& sample);
// The same summed over samples, in order.
std::vector<TokenStats> CountModuleTokens(const Model& model, const std::vector<Sample>& samples);
std::vector<TokenStats> CountModuleTokens(const Model& model, const std::vector<const Sample*>& samples);

// Module `module`'s sequence for one sample as attention-mask segments
// (data/attention_mask.h), in sequence order: per document, an LLM's text
// with its inputs' tokens embedded in the middle of it (the thesis' embedded
// layout, Fig. 3.5b; where a sample puts its images the workload does not
// say), input i as modality i (each input ceiled through the module's
// downsample on its own); an encoder's sequences each a document of their own.
std::vector<MaskSegment> ModuleMaskSegments(const Model& model, int module, const Sample& sample);

}  // namespace loom
