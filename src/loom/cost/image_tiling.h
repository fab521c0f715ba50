// What one image becomes under a tiling image processor (spec/module.h
// ImageTiling): how many encoder sequences of how many tokens, and how many
// tokens reach the consumers (the LLM). Each kind restates its Hugging Face
// processor and model code (transformers 5.24); the tests check the counts
// against the real processors' outputs on the same image sizes.
#pragma once

#include <cstdint>

#include "loom/spec/module.h"

namespace loom {

struct ImageTiles {
  int64_t sequences = 1;            // encoder sequences (crops, base or global image)
  int64_t tokens_per_sequence = 0;  // each sequence's tokens in the encoder (class token, padding included)
  int64_t out_tokens = 0;           // tokens handed downstream for the whole image
};

// REQUIRES: r.tiling != kNone, width_px and height_px >= 1.
ImageTiles TileImage(const TokenRule& r, int64_t width_px, int64_t height_px);

}  // namespace loom
