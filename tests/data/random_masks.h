// Random documents of text, image and audio runs for the bitfield-mask tests
// (tests/data/attention_mask_test.cpp, tests/runtime/bitfield_attention_test.cpp).
#pragma once

#include <random>
#include <vector>

#include "loom/data/attention_mask.h"

namespace loom::test {

// 1-3 documents of 1-`max_runs` runs each, every run 1-`max_tokens` tokens of
// text (-1) or modality 0 or 1.
inline std::vector<MaskSegment> RandomSegments(std::mt19937& rng, int max_runs, int64_t max_tokens) {
  std::vector<MaskSegment> out;
  const int docs = 1 + static_cast<int>(rng() % 3);
  for (int d = 0; d < docs; ++d) {
    const int runs = 1 + static_cast<int>(rng() % max_runs);
    for (int r = 0; r < runs; ++r) {
      out.push_back({1 + static_cast<int64_t>(rng() % max_tokens), static_cast<int>(rng() % 3) - 1, d});
    }
  }
  return out;
}

}  // namespace loom::test
