// Calibration files (`--calibration FILE`; docs/cost-model.md).
#include "fuzz_input.h"
#include "loom/cost/calibration.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loom::fuzz::ExpectOnlyLoomErrors(
      [&] { (void)loom::ParseCalibration(loom::fuzz::Text(data, size), "fuzz-calibration.yaml"); });
  return 0;
}
