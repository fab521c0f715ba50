#include "loom/data/sample_modalities.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <vector>

#include "loom/error.h"

namespace loom {

void CheckModelReadsSamples(const Model& model, const Batch& batch, const std::string& where) {
  bool images = false, videos = false, audio = false;
  for (const Module& m : model.modules) {
    images = images || m.tokens.source == TokenSource::kImage;
    videos = videos || m.tokens.source == TokenSource::kVideo;
    audio = audio || m.tokens.source == TokenSource::kAudio;
  }
  std::vector<std::string> reads = {"text"};
  if (images) reads.push_back("images");
  if (videos) reads.push_back("video clips");
  if (audio) reads.push_back("audio");
  // A sample may carry more than the model reads: Mosaic's fixed inputs (an
  // image, a clip and audio each) feed every encoder its models have, each
  // what it reads. A sample none of whose inputs the model reads is another
  // dataset's.
  for (size_t i = 0; i < batch.samples.size(); ++i) {
    const Sample& s = batch.samples[i];
    const bool has_inputs = !s.images.empty() || !s.videos.empty() || !s.audios.empty();
    const bool read = (images && !s.images.empty()) || (videos && !s.videos.empty()) || (audio && !s.audios.empty());
    if (!has_inputs || read) continue;
    std::vector<std::string> carries;
    if (!s.images.empty()) carries.push_back("images");
    if (!s.videos.empty()) carries.push_back("video clips");
    if (!s.audios.empty()) carries.push_back("audio");
    throw Error(
        fmt::format("{}: sample {} carries {}, which no module of model {} reads (it reads {}); valid: "
                    "samples of what the model reads",
                    where, i, fmt::join(carries, " and "), model.name, fmt::join(reads, ", ")));
  }
}

}  // namespace loom
