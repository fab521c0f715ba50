// checkpoint.json, the manifest of a fault-tolerant run's checkpoint
// (docs/runtime.md, "Checkpoints"): what a run that stopped, or a periodic
// checkpoint, saved. The runtime writes it (runtime/checkpoint_dir.h) and
// `--resume` reads it; reading is torch-free so fuzz/checkpoint_manifest_fuzzer
// can feed it anything.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom {

inline constexpr const char* kCheckpointFormat = "loom-checkpoint-1";

struct CheckpointManifest {
  int steps_done = 0;  // the state is the one after this many steps
  std::string model;
  uint64_t seed = 0;                // the workload's (frozen layers and data come from it)
  std::vector<std::string> layers;  // "{module}_{layer}" files written
  std::string outcome;              // why it was written
};

// The manifest as written: JSON, two-space indented, with a final newline.
std::string CheckpointManifestText(const CheckpointManifest& m);

// Reads `text`, the manifest at `path`. Throws loom::Error naming the path
// and the field that is missing, of the wrong type or out of range: a format
// other than loom-checkpoint-1, steps_done < 0, a layer name that is not a
// plain "{module}_{layer}" file name (no '/', not "." or ".."; it names a
// file beside the manifest), a layer listed twice.
CheckpointManifest ParseCheckpointManifest(const std::string& text, const std::string& path);

}  // namespace loom
