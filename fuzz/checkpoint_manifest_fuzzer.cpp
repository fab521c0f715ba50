// checkpoint.json, the manifest `loom run --resume DIR` reads
// (weights/run_checkpoint.h): any text is a manifest or a loom::Error, and
// what parses writes back to the same manifest.
#include <cstdlib>

#include "fuzz_input.h"
#include "loom/weights/run_checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = loom::fuzz::Text(data, size);
  loom::fuzz::ExpectOnlyLoomErrors([&] {
    using loom::weights::ParseRunCheckpointManifest;
    const auto m = ParseRunCheckpointManifest(text, "fuzz/checkpoint.json");
    const auto again = ParseRunCheckpointManifest(loom::weights::RunCheckpointManifestText(m), "fuzz/checkpoint.json");
    if (again.steps_done != m.steps_done || again.model != m.model || again.seed != m.seed ||
        again.global_batch != m.global_batch || again.plan != m.plan || again.parts != m.parts ||
        again.has_loss_scale != m.has_loss_scale || again.loss_scale != m.loss_scale ||
        again.growth_tracker != m.growth_tracker || again.hysteresis_tracker != m.hysteresis_tracker ||
        again.model_identity != m.model_identity || again.data_stream != m.data_stream) {
      std::abort();  // a manifest that does not survive its own writer
    }
  });
  return 0;
}
