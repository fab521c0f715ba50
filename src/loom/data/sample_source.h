// A SampleSource produces the samples of one iteration. Synthetic sources
// reproduce the statistics the seed papers publish (docs/workloads.md); the
// JSONL source replays a user's own per-sample metadata. Draw() is a pure
// function of (seed, iteration): the same arguments give the same batch.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "loom/data/sample.h"
#include "loom/spec/workload.h"

namespace loom {

class SampleSource {
 public:
  virtual ~SampleSource() = default;
  // The `count` samples of iteration `iteration` of a run seeded with `seed`.
  virtual Batch Draw(int64_t count, uint64_t seed, int64_t iteration) const = 0;
};

// The source a workload names. Throws loom::Error for an unreadable JSONL file.
std::unique_ptr<SampleSource> MakeSampleSource(const SourceSpec& spec);

// The source of `workload`; an unreadable JSONL file is an error naming the
// workload file that points at it. Made once, it draws many batches without
// reading the file again.
std::unique_ptr<SampleSource> WorkloadSource(const Workload& workload);

// Convenience: the global batch of iteration `iteration` of `workload`.
Batch DrawBatch(const Workload& workload, int64_t iteration);

}  // namespace loom
