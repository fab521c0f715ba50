#pragma once

namespace loom {

// What a microbatch carries of one sample: the whole sample (item = -1), or
// one of its images, clips or audios (item i counts images, then videos, then
// audios) with the sample's documents but no text: what an encoder sees of it
// when PipeWeaver splits sub-microbatches image by image.
struct SamplePiece {
  int sample = 0;
  int item = -1;
  bool operator==(const SamplePiece&) const = default;
};

}  // namespace loom
