// Workload YAML (docs/workloads.md) as `--workload FILE` takes it, then the
// first batch drawn from it. Batches past 4096 samples are not drawn: drawing
// is linear in the batch (bounded by kMaxGlobalBatch), and a large draw is
// work, not a defect; issue 21 owns its speed.
#include "fuzz_input.h"
#include "loom/data/sample_source.h"
#include "loom/spec/workload.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loom::fuzz::ExpectOnlyLoomErrors([&] {
    const loom::Workload w = loom::ParseWorkload(loom::fuzz::Text(data, size), "fuzz-workload.yaml");
    if (w.global_batch <= 4096) (void)loom::DrawBatch(w, 0);
  });
  return 0;
}
