#include "loom/data/synthetic_sources.h"

#include <algorithm>
#include <cmath>

namespace loom {

Batch SyntheticSource::Draw(int64_t count, uint64_t seed, int64_t iteration) const {
  Rng rng(Rng::Mix(seed, static_cast<uint64_t>(iteration)));
  Batch batch;
  batch.samples.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    batch.samples.push_back(generator_(rng));
  }
  return batch;
}

Sample DrawTextSample(const SourceSpec& spec, Rng&) {
  Sample s;
  s.AddDoc(spec.seq_len);
  return s;
}

// LAION-2B captions average 16.4 text tokens per image (PipeWeaver §8, Fig. 3a).
// Captions are short and right-skewed: log-normal with that mean, sigma 0.5,
// clipped to [3, 77] (77 = the CLIP tokenizer's context, LAION's caption cap).
Sample DrawLaionSample(const SourceSpec& spec, Rng& rng) {
  Sample s;
  int64_t used = 0;
  while (true) {
    int64_t text = std::clamp<int64_t>(std::llround(rng.LogNormalWithMean(16.4, 0.5)), kLaionMinCaptionTokens,
                                        kLaionMaxCaptionTokens);
    if (used + text + spec.image_tokens > spec.pack_tokens) {
      break;
    }
    int doc = s.AddDoc(text);
    s.images.push_back({spec.image_px, spec.image_px, doc});
    used += text + spec.image_tokens;
  }
  return s;
}

// OBELICS: interleaved web documents; text tokens per image range from 0.4 to
// 3115 with a heavy tail (PipeWeaver §8, Fig. 3a). The OBELICS release has
// 141M documents, 353M images and 115B text tokens: 2.5 images per document
// and 326 text tokens per image on average. A document draws a geometric
// number of images (mean 2.5) and a log-normal text/image ratio (mean 326,
// sigma 1.2) clipped to the published range. Documents are packed greedily
// into pack_tokens, each image counting image_tokens (169 at 768 px); a
// document that does not fit ends the pack, and one too long on its own is
// cut to fit.
Sample DrawObelicsSample(const SourceSpec& spec, Rng& rng) {
  Sample s;
  int64_t used = 0;
  while (true) {
    int64_t images = std::min<int64_t>(rng.Geometric(2.5), 48);
    double ratio = std::clamp(rng.LogNormalWithMean(326.0, 1.2), 0.4, 3115.0);
    int64_t text = std::max<int64_t>(1, std::llround(ratio * static_cast<double>(images)));
    int64_t need = text + images * spec.image_tokens;
    if (used + need > spec.pack_tokens) {
      if (s.num_docs() > 0) {
        break;
      }
      images = std::min(images, spec.pack_tokens / spec.image_tokens);
      text = std::max<int64_t>(1, spec.pack_tokens - images * spec.image_tokens);
      need = text + images * spec.image_tokens;
    }
    int doc = s.AddDoc(text);
    for (int64_t i = 0; i < images; ++i) {
      s.images.push_back({spec.image_px, spec.image_px, doc});
    }
    used += need;
  }
  return s;
}

// Text-to-video in the MovieGen setting PipeWeaver uses (§8): 16 FPS, clips up
// to 16 s, short clips grouped up to 8 per sample with total below 16 s.
// Clip length: log-normal, mean 6 s, sigma 0.7, clipped to [1, 16] s; caption:
// log-normal, mean 120 tokens, sigma 0.5, clipped to [8, 512].
Sample DrawVideoSample(const SourceSpec& spec, Rng& rng) {
  Sample s;
  double total_s = 0;
  while (static_cast<int64_t>(s.videos.size()) < spec.max_clips) {
    double clip_s = std::clamp(rng.LogNormalWithMean(6.0, 0.7), 1.0, spec.max_video_s);
    if (!s.videos.empty() && total_s + clip_s > spec.max_video_s) {
      break;
    }
    int64_t caption = std::clamp<int64_t>(std::llround(rng.LogNormalWithMean(120.0, 0.5)), 8, 512);
    int doc = s.AddDoc(caption);
    int64_t frames = std::max<int64_t>(1, std::llround(clip_s * spec.fps));
    s.videos.push_back({frames, spec.video_px, spec.video_px, doc});
    total_s += clip_s;
  }
  return s;
}

Sample DrawMosaicFixedSample(const SourceSpec&, Rng&) {
  Sample s;
  int doc = s.AddDoc(2048);
  s.images.push_back({512, 512, doc});
  s.videos.push_back({32, 512, 512, doc});
  s.audios.push_back({8.0, doc});
  return s;
}

Sample DrawCornstarchSample(const SourceSpec&, Rng&) {
  Sample s;
  int doc = s.AddDoc(1024);
  s.images.push_back({1280, 720, doc});
  s.audios.push_back({120.0, doc});
  return s;
}

}  // namespace loom
