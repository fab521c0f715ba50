// A Workload says what one training run feeds the model: where samples come
// from (a named synthetic distribution or a JSONL file of per-sample sizes),
// the global batch, microbatch size, precision, ZeRO stage and seed.
// Invariants after loading: sizes > 0, zero_stage in 0..3.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/spec/precision.h"

namespace loom {

// Parameters of a sample source; which ones matter depends on `kind`
// (docs/spec-format.md lists them per kind).
struct SourceSpec {
  std::string kind = "text";  // text | laion | obelics | video | mosaic-fixed | cornstarch-synthetic | dynamic-images |
                              // synthchartnet | chartqa | cocoqa | llava-150k (each also -fitted) | jsonl
  int64_t seq_len = 2048;     // text: tokens per sample
  int64_t pack_tokens = 8192;  // laion, obelics: LLM tokens per packed sequence
  int64_t image_tokens = 169;  // laion, obelics: LLM tokens one image becomes (used for packing)
  int64_t image_px = 768;      // laion, obelics: image side in pixels
  int64_t video_px = 512;      // video: frame side
  double fps = 16;             // video frames per second
  double max_video_s = 16;     // video: longest clip and longest group per sample
  int64_t max_clips = 8;       // video: clips grouped into one sample
  std::string path;            // jsonl: file of per-sample metadata
};

// LAION captions are clipped to [3, 77] text tokens (data/synthetic_sources.cpp):
// a sample holds an image only with room for its tokens and the shortest caption.
constexpr int64_t kLaionMinCaptionTokens = 3;
constexpr int64_t kLaionMaxCaptionTokens = 77;

// The largest global batch Loom draws (samples per iteration): 2^24, above any
// published run by two orders of magnitude; a batch is held in memory at once.
constexpr int64_t kMaxGlobalBatch = int64_t{1} << 24;
// A video source's frame rate and longest clip (frames are counted in int64).
constexpr double kMaxFps = 1000;
constexpr double kMaxVideoSeconds = 86400;

struct Workload {
  std::string name;
  std::string source_file;  // where it was defined ("builtin" or a path)
  SourceSpec source;
  int64_t global_batch = 128;
  int64_t microbatch_size = 1;
  Precision precision = Precision::kBf16;
  int zero_stage = 1;
  uint64_t seed = 0;
};

struct Model;
// The built-in workload that feeds every modality of `model`: video if a
// module reads video, cornstarch-synthetic if it reads audio and images,
// mosaic-fixed for audio alone, obelics for images, else text.
Workload DefaultWorkload(const Model& model);

// Named workloads: text, laion, obelics, video, mosaic-fixed, cornstarch-synthetic,
// dynamic-images, and Entrain's FineVision subsets synthchartnet, chartqa, cocoqa, llava-150k
// (derived from the data's public description) and the same with -fitted (tuned to the
// thesis' ratios; data/finevision.h).
std::vector<std::string> WorkloadNames();
// A named workload or a workload YAML file; throws loom::Error otherwise.
Workload LoadWorkload(const std::string& name_or_path);
Workload ParseWorkload(const std::string& yaml_text, const std::string& file);

}  // namespace loom
