// Model YAML (docs/spec-format.md) as `--model FILE` takes it, then what
// `loom inspect` computes from it: parameters, FLOPs per module on a few
// samples of its default workload (where the overflows of issue 20 were).
#include "fuzz_input.h"
#include "loom/report/inspect.h"
#include "loom/spec/model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loom::fuzz::ExpectOnlyLoomErrors([&] {
    const loom::Model model = loom::ParseModel(loom::fuzz::Text(data, size), "fuzz-model.yaml");
    loom::InspectOptions options;
    options.max_samples = 2;
    (void)loom::FormatInspect(loom::InspectModel(model, options));
  });
  return 0;
}
