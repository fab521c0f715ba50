// PyTorch pipelining schedule CSVs (`loom simulate --import-pytorch-csv`):
// read, checked by PyTorch's rules and turned into Loom's rank orders.
#include "fuzz_input.h"
#include "loom/export/pytorch_schedule.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loom::fuzz::ExpectOnlyLoomErrors([&] {
    const loom::PtSchedule order = loom::ParsePytorchCsv(loom::fuzz::Text(data, size), "fuzz.csv");
    (void)loom::ImportPytorchSchedule(order, "fuzz.csv");
    (void)loom::FormatPytorchCsv(order);
  });
  return 0;
}
