#include "loom/data/finevision.h"

#include <algorithm>
#include <cmath>

namespace loom {

namespace {

constexpr double kMinPixels = 4 * 28 * 28;
constexpr double kMaxPixels = 1280 * 28 * 28;

// Sources of the derived shapes:
// [FV]   FineVision subset table, "FineVision: Open Data Is All You Need"
//        (Wiedmann et al., 2025; https://huggingface.co/spaces/HuggingFaceM4/FineVision,
//        arXiv:2510.17269), dataset https://huggingface.co/datasets/HuggingFaceM4/FineVision:
//        per subset Total Images, Samples, Turns, Question Tokens, Answer Tokens.
//        Every turn with question + answer over 8192 tokens was removed; images
//        were resized to a longest side of at most 2048 px. The table does not
//        name its tokenizer; Loom reads its counts as Llama-3 tokens and adds no
//        chat-template tokens.
// [SCN]  SynthChartNet card, https://huggingface.co/datasets/ds4sd/SynthChartNet:
//        charts rendered at 120 DPI with Matplotlib, Seaborn and Pyecharts; the
//        answer is the chart's table in OTSL.
// [COCO] COCO train statistics (https://github.com/Lextal/SotA-CV, datasets/coco_detection.md):
//        90% of images have 167,500-355,840 pixels and a height / width in [0.6, 1.5].
//        CocoQA (Ren et al., 2015) and LLaVA-Instruct-150K (Liu et al., 2023) use COCO images.
// Log-normals are fitted to a published 90% range as median = its geometric
// mid-point, sigma = ln(high / low) / (2 x 1.645); the mean is median x exp(sigma^2 / 2).
constexpr double kCocoSigma = 0.229;             // ln(355840 / 167500) / 3.29 [COCO]
constexpr double kCocoMpx = 0.2506;              // sqrt(167500 x 355840) x exp(0.229^2 / 2) [COCO]
constexpr double kCocoAspect = 1.054;            // 1 / sqrt(0.6 x 1.5) [COCO]
constexpr double kPublishedAspectSigma = 0.279;  // ln(1.5 / 0.6) / 3.29 [COCO], the one published aspect spread
// No source publishes a spread of text length per subset, nor one of image size
// for the chart subsets: every such spread is this one default, the same for
// every subset and not tuned to any result (docs/results/entrain.md shows the
// ratios at 0.3 and 0.8 too).
constexpr double kUnpublishedSigma = 0.5;
constexpr int64_t kFineVisionMaxTurnTokens = 8192;  // [FV] cleaning

}  // namespace

const std::vector<FineVisionShape>& FineVisionShapes() {
  static const std::vector<FineVisionShape> shapes = {
      // ---- Derived from the public descriptions (cited above). ----
      // [FV] SynthChartNet: 500,000 images, 500,000 samples, 500,000 turns,
      // 2,169,240 question + 67,392,223 answer tokens -> 1 image and 139.1 text
      // tokens a sample. Image size: not published; 120 DPI [SCN] x Matplotlib's
      // default 6.4 x 4.8 in figure = 768 x 576 (Pyecharts' default canvas,
      // 900 x 500, gives 0.45 MP too): an assumption, not a measurement.
      {"synthchartnet", 768.0 * 576 / 1e6, kUnpublishedSigma, 768.0 / 576, kPublishedAspectSigma, 139.1,
       kUnpublishedSigma, kFineVisionMaxTurnTokens, false},
      // [FV] chartqa: 18,265 images and samples, 28,287 turns, 625,569 + 134,793
      // tokens -> 1 image, 41.6 tokens. Image size: not published; ChartQA's charts
      // are mostly Statista exports 800 px wide (800 x 557), the assumed mean.
      {"chartqa", 800.0 * 557 / 1e6, kUnpublishedSigma, 800.0 / 557, kPublishedAspectSigma, 41.6, kUnpublishedSigma,
       kFineVisionMaxTurnTokens, false},
      // [FV] cocoqa: 46,287 images and samples, 78,736 turns, 1,136,238 + 212,480
      // tokens -> 1 image, 29.1 tokens; COCO photographs [COCO].
      {"cocoqa", kCocoMpx, kCocoSigma, kCocoAspect, kPublishedAspectSigma, 29.1, kUnpublishedSigma,
       kFineVisionMaxTurnTokens, false},
      // [FV] LLaVA_Instruct_150K: 157,710 images and samples, 361,405 turns,
      // 4,412,600 + 28,719,278 tokens -> 1 image, 210.1 tokens; COCO photographs [COCO].
      {"llava-150k", kCocoMpx, kCocoSigma, kCocoAspect, kPublishedAspectSigma, 210.1, kUnpublishedSigma,
       kFineVisionMaxTurnTokens, false},

      // ---- FITTED: tuned so Loom's cost model reproduces the thesis' ratios
      // (tests/data/finevision_test.cpp; docs/workloads.md says how). Not data. ----
      // Synthetic chart renderings with their full table transcription: the
      // widest spread of both image size and text length (the thesis' "most variable").
      {"synthchartnet-fitted", 0.68, 0.7, 1.4, 0.25, 170, 0.9, 4096, true},
      // Real charts, short questions and answers.
      {"chartqa-fitted", 0.42, 0.35, 1.35, 0.2, 48, 0.5, 1024, true},
      // COCO photographs (about 640 x 480), one-line questions.
      {"cocoqa-fitted", 0.28, 0.12, 1.33, 0.15, 22, 0.3, 256, true},
      // COCO photographs, multi-turn instruction conversations (FineVision's mean
      // is 210 text tokens; 68 is what the thesis' 2.43 needs under Loom's cost model).
      {"llava-150k-fitted", 0.29, 0.12, 1.33, 0.15, 68, 0.6, 2048, true},
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
