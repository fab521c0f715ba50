#include "loom/data/finevision.h"

#include <algorithm>
#include <cmath>

namespace loom {

namespace {

constexpr double kMinPixels = 4 * 28 * 28;
constexpr double kMaxPixels = 1280 * 28 * 28;

}  // namespace

const std::vector<FineVisionShape>& FineVisionShapes() {
  // Calibrated in tests/data/finevision_test.cpp; docs/workloads.md says how.
  static const std::vector<FineVisionShape> shapes = {
      // Synthetic chart renderings with their full table transcription: the
      // widest spread of both image size and text length (the thesis' "most variable").
      {"synthchartnet", 0.68, 0.7, 1.4, 0.25, 170, 0.9, 4096},
      // Real charts, short questions and answers.
      {"chartqa", 0.42, 0.35, 1.35, 0.2, 48, 0.5, 1024},
      // COCO photographs (about 640 x 480), one-line questions.
      {"cocoqa", 0.28, 0.12, 1.33, 0.15, 22, 0.3, 256},
      // COCO photographs, multi-turn instruction conversations.
      {"llava-150k", 0.29, 0.12, 1.33, 0.15, 68, 0.6, 2048},
  };
  return shapes;
}

const FineVisionShape* FindFineVisionShape(const std::string& name) {
  for (const auto& s : FineVisionShapes()) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

Sample DrawFineVisionSample(const FineVisionShape& shape, Rng& rng) {
  const double area =
      std::clamp(rng.LogNormalWithMean(shape.image_mpx * 1e6, shape.image_sigma), kMinPixels, kMaxPixels);
  const double aspect = shape.aspect * std::exp(shape.aspect_sigma * rng.Normal());
  const int64_t w = std::max<int64_t>(28, std::llround(std::sqrt(area * aspect)));
  const int64_t h = std::max<int64_t>(28, std::llround(std::sqrt(area / aspect)));
  const int64_t text = std::clamp<int64_t>(std::llround(rng.LogNormalWithMean(shape.text_tokens, shape.text_sigma)), 1,
                                           shape.max_text_tokens);
  Sample s;
  const int doc = s.AddDoc(text);
  s.images.push_back({w, h, doc});
  return s;
}

}  // namespace loom
