// JsonlSource replays a file of per-sample metadata, one JSON object a line
// (format in docs/workloads.md). Iteration i of a run takes the next global
// batch from a seeded permutation of the file, epoch after epoch, so every
// sample is used once per epoch and the order depends only on the seed.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "loom/data/sample_source.h"

namespace loom {

class JsonlSource : public SampleSource {
 public:
  // Reads and validates the whole file; throws loom::Error naming the line and field.
  explicit JsonlSource(const std::string& path);
  Batch Draw(int64_t count, uint64_t seed, int64_t iteration) const override;
  const std::vector<Sample>& samples() const { return samples_; }

 private:
  std::vector<Sample> samples_;
};

// Parses one line; `where` ("file:line") prefixes errors; `dir`: the folder
// a pixel_values file is named relative to.
Sample ParseJsonlSample(const std::string& line, const std::string& where, const std::string& dir = ".");

// A JSONL source's sample with its token ids, read again from its line
// (SampleTokens::file, offset); one that has them is returned as it is.
// Throws loom::Error naming the line where it cannot be read or changed.
std::shared_ptr<const SampleTokens> LoadTokenIds(const SampleTokens& meta);

}  // namespace loom
