// PipeWeaver §8.1's dynamic workload (Fig. 9b): the number of images per
// sample drifts over training. Iterations run in cycles of 20: over the first
// 5 the lower bound rises 0 -> 16 with the upper bound at 32, over the next 15
// both fall linearly to 0. Each sample draws its image count uniformly between
// the bounds (at most pack_tokens / image_tokens) and fills the rest of its
// packed sequence with text. 40 iterations give the paper's two rises and falls.
#pragma once

#include "loom/data/sample_source.h"
#include "loom/spec/workload.h"

namespace loom {

// Image-count bounds of iteration `iteration` (lower, upper).
std::pair<int, int> DynamicImageBounds(int64_t iteration);

class DynamicImagesSource : public SampleSource {
 public:
  explicit DynamicImagesSource(const SourceSpec& spec) : spec_(spec) {}
  Batch Draw(int64_t count, uint64_t seed, int64_t iteration) const override;

 private:
  SourceSpec spec_;
};

}  // namespace loom
