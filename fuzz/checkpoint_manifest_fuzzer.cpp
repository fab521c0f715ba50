// checkpoint.json, the manifest `loom run --resume DIR` reads
// (weights/checkpoint_manifest.h): any text is a manifest or a loom::Error,
// and what parses writes back to the same manifest.
#include <cstdlib>

#include "fuzz_input.h"
#include "loom/weights/checkpoint_manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = loom::fuzz::Text(data, size);
  loom::fuzz::ExpectOnlyLoomErrors([&] {
    const loom::CheckpointManifest m = loom::ParseCheckpointManifest(text, "fuzz/checkpoint.json");
    const loom::CheckpointManifest again =
        loom::ParseCheckpointManifest(loom::CheckpointManifestText(m), "fuzz/checkpoint.json");
    if (again.steps_done != m.steps_done || again.model != m.model || again.seed != m.seed ||
        again.layers != m.layers || again.outcome != m.outcome) {
      std::abort();  // a manifest that does not survive its own writer
    }
  });
  return 0;
}
