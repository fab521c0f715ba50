// Cluster YAML (docs/spec-format.md) and the GPU:NODESxPER_NODE shape
// `--cluster` takes: the first line is tried as a shape or testbed name, the
// whole input as YAML.
#include "fuzz_input.h"
#include "loom/spec/cluster.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = loom::fuzz::Text(data, size);
  const std::string first_line = text.substr(0, text.find('\n'));
  // A name with a slash could name any file on this machine; shapes and testbeds have none.
  if (first_line.find('/') == std::string::npos && first_line.find('.') == std::string::npos) {
    loom::fuzz::ExpectOnlyLoomErrors([&] { (void)loom::LoadCluster(first_line); });
  }
  loom::fuzz::ExpectOnlyLoomErrors([&] { (void)loom::ParseCluster(text, "fuzz-cluster.yaml"); });
  return 0;
}
