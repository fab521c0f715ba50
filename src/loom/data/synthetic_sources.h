// The synthetic sample generators, one per published dataset shape. Each
// draws one sample from an Rng; SyntheticSource turns that into a SampleSource.
#pragma once

#include <functional>

#include "loom/data/rng.h"
#include "loom/data/sample_source.h"

namespace loom {

using SampleGenerator = std::function<Sample(Rng&)>;

class SyntheticSource : public SampleSource {
 public:
  explicit SyntheticSource(SampleGenerator generator) : generator_(std::move(generator)) {}
  Batch Draw(int64_t count, uint64_t seed, int64_t iteration) const override;

 private:
  SampleGenerator generator_;
};

// Fixed-length text, seq_len tokens (LLM-only models, Oobleck runs).
Sample DrawTextSample(const SourceSpec& spec, Rng& rng);
// LAION-like pairs (~16.4 text tokens per image) packed into pack_tokens.
Sample DrawLaionSample(const SourceSpec& spec, Rng& rng);
// OBELICS-like interleaved documents packed into pack_tokens.
Sample DrawObelicsSample(const SourceSpec& spec, Rng& rng);
// Video clips at fps, grouped up to max_clips and max_video_s per sample.
Sample DrawVideoSample(const SourceSpec& spec, Rng& rng);
// Mosaic Table 2: 2048 text tokens, a 512x512 image, 32 frames of 512x512, 8 s audio.
Sample DrawMosaicFixedSample(const SourceSpec& spec, Rng& rng);
// Cornstarch §3.5: 1k text tokens, one 1280x720 image, one 2-minute audio clip.
Sample DrawCornstarchSample(const SourceSpec& spec, Rng& rng);

}  // namespace loom
