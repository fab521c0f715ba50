// Per-sample metadata lines (docs/workloads.md, `source: {kind: jsonl}`):
// every line parsed as JsonlSource parses it.
#include "fuzz_input.h"
#include "loom/data/jsonl_source.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = loom::fuzz::Text(data, size);
  size_t begin = 0;
  for (int line = 1; begin <= text.size(); ++line) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    loom::fuzz::ExpectOnlyLoomErrors(
        [&] { (void)loom::ParseJsonlSample(text.substr(begin, end - begin), "fuzz.jsonl:" + std::to_string(line)); });
    begin = end + 1;
  }
  return 0;
}
