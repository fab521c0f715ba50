// safetensors headers (a Hugging Face checkpoint's weights, `loom run --model DIR`).
#include "fuzz_input.h"
#include "loom/weights/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loom::fuzz::ExpectOnlyLoomErrors([&] {
    const std::string bytes = loom::fuzz::Text(data, size);
    (void)loom::weights::ParseSafetensorsLayout(bytes, bytes.size(), "fuzz.safetensors");
  });
  return 0;
}
