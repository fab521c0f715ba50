#include "loom/spec/workload.h"
#include "loom/path_kind.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>

#include "loom/did_you_mean.h"
#include "loom/error.h"
#include "loom/spec/model.h"
#include "loom/spec/yaml_reader.h"

namespace loom {

namespace {

// Entrain's FineVision subsets, derived and -fitted: the shapes' names in
// data/finevision.cpp (a later step of the flow, so listed here;
// FineVision.EverySubsetIsANamedWorkload keeps the two lists equal).
const std::vector<std::string> kFineVisionKinds = {
    "synthchartnet",        "chartqa",        "cocoqa",        "llava-150k",
    "synthchartnet-fitted", "chartqa-fitted", "cocoqa-fitted", "llava-150k-fitted"};

// The built-in kinds, then Entrain's FineVision subsets.
std::vector<std::string> BuiltinKinds() {
  std::vector<std::string> kinds = {
      "text", "laion", "obelics", "video", "mosaic-fixed", "cornstarch-synthetic", "dynamic-images"};
  kinds.insert(kinds.end(), kFineVisionKinds.begin(), kFineVisionKinds.end());
  return kinds;
}

const std::vector<std::string>& SourceKinds() {
  static const std::vector<std::string> kinds = [] {
    std::vector<std::string> k = BuiltinKinds();
    k.push_back("jsonl");
    return k;
  }();
  return kinds;
}

// Default global batches follow each seed's evaluation: MMScale 1920 (LAION),
// Mosaic 32, Cornstarch 48, Entrain 512; the others are common choices.
Workload Named(const std::string& kind) {
  Workload w;
  w.name = kind;
  w.source_file = "builtin";
  w.source.kind = kind;
  if (kind == "text") {
    w.global_batch = 512;
  } else if (kind == "laion") {
    w.global_batch = 1920;
    w.source.image_px = 224;  // ViT-H/14 at 224 px (MMScale's encoder)
    w.source.image_tokens = 256;
  } else if (kind == "obelics") {
    w.global_batch = 128;
  } else if (kind == "video") {
    w.global_batch = 64;
  } else if (kind == "dynamic-images") {
    w.global_batch = 32;  // PipeWeaver §8.1 on VLM-S
  } else if (kind == "mosaic-fixed") {
    w.global_batch = 32;
  } else if (kind == "cornstarch-synthetic") {
    w.global_batch = 48;
    w.microbatch_size = 4;
  } else if (std::find(kFineVisionKinds.begin(), kFineVisionKinds.end(), kind) != kFineVisionKinds.end()) {
    w.global_batch = 512;  // Entrain §4.7: microbatch 4, global batch 512
    w.microbatch_size = 4;
  }
  return w;
}

// A source field its kind never reads would be silently ignored (fps on an
// image source): name the kinds that read it. seq_len is read by every kind
// (a plan records it, and exports give it as the sequence length).
void RefuseFieldsTheKindIgnores(const YamlMap& src, const std::string& kind) {
  static const std::vector<std::string> images = {"laion", "obelics", "dynamic-images"};
  static const std::vector<std::pair<std::string, std::vector<std::string>>> readers = {
      {"pack_tokens", images}, {"image_tokens", images},   {"image_px", images},    {"video_px", {"video"}},
      {"fps", {"video"}},      {"max_video_s", {"video"}}, {"max_clips", {"video"}}};
  for (const auto& [key, kinds] : readers) {
    if (src.Has(key) && std::find(kinds.begin(), kinds.end(), kind) == kinds.end()) {
      throw src.ErrorAt(key, fmt::format("the '{}' source does not read it; {} is read by the {} source{}", kind, key,
                                         fmt::join(kinds, ", "), kinds.size() > 1 ? "s" : ""));
    }
  }
}

}  // namespace

std::vector<std::string> WorkloadNames() { return BuiltinKinds(); }

Workload DefaultWorkload(const Model& model) {
  bool image = false, video = false, audio = false;
  for (const auto& m : model.modules) {
    image = image || m.tokens.source == TokenSource::kImage;
    video = video || m.tokens.source == TokenSource::kVideo;
    audio = audio || m.tokens.source == TokenSource::kAudio;
  }
  if (video) return Named("video");
  if (audio) return Named(image ? "cornstarch-synthetic" : "mosaic-fixed");
  if (image) return Named("obelics");
  return Named("text");
}

Workload ParseWorkload(const std::string& yaml_text, const std::string& file) {
  YamlMap doc(ParseYaml(yaml_text, file), file, "");
  Workload w;
  w.name = doc.String("workload");
  w.source_file = file;
  YamlMap src(doc.Child("source"), file, "source");
  std::string kind = src.Enum("kind", SourceKinds());
  if (kind != "jsonl") {
    std::string name = w.name;
    w = Named(kind);  // a named kind's defaults, then the file's fields on top
    w.name = name;
    w.source_file = file;
  }
  RefuseFieldsTheKindIgnores(src, kind);
  SourceSpec& s = w.source;
  s.kind = kind;
  s.seq_len = src.PositiveInt("seq_len", s.seq_len);
  s.pack_tokens = src.PositiveInt("pack_tokens", s.pack_tokens);
  s.image_tokens = src.PositiveInt("image_tokens", s.image_tokens);
  s.image_px = src.PositiveInt("image_px", s.image_px);
  s.video_px = src.PositiveInt("video_px", s.video_px);
  s.fps = src.PositiveReal("fps", s.fps);
  s.max_video_s = src.PositiveReal("max_video_s", s.max_video_s);
  // Frames are counted in int64 (clip seconds x fps): bounded far above any video, not wrapped.
  if (s.fps > kMaxFps)
    throw src.ErrorAt("fps", fmt::format("must be at most {} frames per second, got {}", kMaxFps, s.fps));
  if (s.max_video_s > kMaxVideoSeconds) {
    throw src.ErrorAt("max_video_s",
                      fmt::format("must be at most {} s (a day), got {}", kMaxVideoSeconds, s.max_video_s));
  }
  s.max_clips = src.PositiveInt("max_clips", s.max_clips);
  if (kind == "jsonl") {
    std::filesystem::path p = src.String("path");
    if (p.is_relative()) {
      p = std::filesystem::path(file).parent_path() / p;
    }
    s.path = p.string();
  }
  src.RejectUnknownKeys();
  // Every LAION sample would pack to nothing: no image fits beside a caption.
  if (kind == "laion" && s.pack_tokens < s.image_tokens + kLaionMinCaptionTokens) {
    throw src.ErrorAt("pack_tokens",
                      fmt::format("{} tokens cannot hold one image ({} tokens) and the shortest caption ({}): every "
                                  "sample would be empty; valid: pack_tokens >= {}",
                                  s.pack_tokens, s.image_tokens, kLaionMinCaptionTokens,
                                  s.image_tokens + kLaionMinCaptionTokens));
  }
  w.global_batch = doc.PositiveIntAtMost("global_batch", w.global_batch, kMaxGlobalBatch);
  w.microbatch_size = doc.PositiveIntAtMost("microbatch_size", w.microbatch_size, kMaxGlobalBatch);
  if (w.microbatch_size > w.global_batch) {  // a microbatch of more samples than the batch has
    throw doc.ErrorAt("microbatch_size", fmt::format("{} samples, more than global_batch {}; valid: 1..{}",
                                                     w.microbatch_size, w.global_batch, w.global_batch));
  }
  const std::string precision = doc.Enum("precision", {"bf16", "fp16", "tf32", "fp32"}, "bf16");
  for (Precision p : {Precision::kBf16, Precision::kFp16, Precision::kTf32, Precision::kFp32}) {
    if (precision == PrecisionName(p)) w.precision = p;
  }
  w.zero_stage = static_cast<int>(doc.NonNegativeInt("zero_stage", w.zero_stage));
  if (w.zero_stage > 3) {
    throw doc.ErrorAt("zero_stage", fmt::format("must be 0, 1, 2 or 3, got {}", w.zero_stage));
  }
  w.seed = static_cast<uint64_t>(doc.NonNegativeInt("seed", 0));
  doc.RejectUnknownKeys();
  return w;
}

Workload LoadWorkload(const std::string& name_or_path) {
  for (const auto& n : WorkloadNames()) {
    if (n == name_or_path) {
      return Named(n);
    }
  }
  if (IsInputFile(KindOfPath(name_or_path))) {
    // A JSONL file of samples is its own workload (`--workload data.jsonl`,
    // `loom run --data`): its samples, the default batch; flags override it.
    if (std::filesystem::path(name_or_path).extension() == ".jsonl") {
      Workload w;
      w.name = std::filesystem::path(name_or_path).stem().string();
      w.source_file = name_or_path;
      w.source.kind = "jsonl";
      w.source.path = name_or_path;
      return w;
    }
    return ParseWorkload(ReadTextFile(name_or_path, "workload YAML"), name_or_path);
  }
  std::string names;
  for (const auto& n : WorkloadNames()) {
    names += (names.empty() ? "" : ", ") + n;
  }
  throw Error(fmt::format("unknown workload '{}': not a built-in name ({}) and no such file{}", name_or_path, names,
                          DidYouMean(name_or_path, WorkloadNames())));
}

}  // namespace loom
