// GPU profiles (`--profile FILE`, what `loom profile` writes; docs/cost-model.md),
// read back and fitted as `--profile` fits them.
#include "fuzz_input.h"
#include "loom/cost/profile.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loom::fuzz::ExpectOnlyLoomErrors([&] {
    const loom::Profile p = loom::ParseProfile(loom::fuzz::Text(data, size), "fuzz-profile.yaml");
    (void)loom::ProfileToYaml(p);
    const loom::ProfiledCostModel fitted(p);  // the fit itself: least squares on the file's numbers
    (void)fitted.name();
  });
  return 0;
}
