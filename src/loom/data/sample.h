// A Sample is one row of a global batch as the model sees it: its text tokens
// and the images, videos and audio clips it carries, grouped into documents.
// Packing puts several documents in one sample; documents never attend to
// each other, so attention cost is quadratic per document, not per sample.
// Invariant: every input's `doc` < num_docs(); doc_text_tokens sums to text_tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace loom {

struct ImageInput {
  int64_t width_px = 0;
  int64_t height_px = 0;
  int doc = 0;
};

struct VideoInput {
  int64_t frames = 0;
  int64_t width_px = 0;
  int64_t height_px = 0;
  int doc = 0;
};

struct AudioInput {
  double seconds = 0;
  int doc = 0;
};

// A sample's real text (a JSONL line with `input_ids`, docs/workloads.md): its
// token ids and labels (-100: not scored; the target of position p is
// labels[p + 1], transformers' shift), one document.
// With images (LLaVA's way): `image_token_id` stands in input_ids for one
// image feature, each image a run of them in order (image_runs: position,
// length), and the images' pixels are tensor `pixel_values` [images,
// channels, height, width] of a safetensors file, as the model's image
// processor makes them.
struct SampleTokens {
  std::vector<int64_t> input_ids, labels;
  std::string where;  // "file:line", for errors
  // What planning needs without the ids: their count, and the targets the
  // loss scores (labels[1:] other than -100). A JSONL source keeps only
  // these in memory (`has_ids` false) and where its line is (`file`,
  // `offset`): each worker loads the ids of the samples its stages run
  // (LoadTokenIds), so no process holds a dataset's ids.
  int64_t length = 0, scored = 0;
  bool has_ids = true;
  std::string file;
  int64_t offset = -1;
  int64_t image_token_id = -1;
  std::vector<std::pair<int64_t, int64_t>> image_runs;
  std::string pixel_values_file;
  int64_t pixel_channels = 0;  // the pixel tensor's [images, channels, height, width]
};

struct Sample {
  // Where the source has them, the sample's token ids (shared: the planner
  // copies samples by the million); null: shapes only.
  std::shared_ptr<const SampleTokens> tokens;
  int64_t text_tokens = 0;
  std::vector<int64_t> doc_text_tokens;  // one entry per document
  std::vector<ImageInput> images;
  std::vector<VideoInput> videos;
  std::vector<AudioInput> audios;

  int num_docs() const { return static_cast<int>(doc_text_tokens.size()); }
  // Adds a document with `text` tokens and returns its index.
  int AddDoc(int64_t text) {
    doc_text_tokens.push_back(text);
    text_tokens += text;
    return num_docs() - 1;
  }
};

// The samples of one iteration (the global batch).
struct Batch {
  std::vector<Sample> samples;
};

}  // namespace loom
