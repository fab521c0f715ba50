#include "loom/spec/precision.h"

namespace loom {

std::string PrecisionName(Precision p) {
  switch (p) {
    case Precision::kBf16: return "bf16";
    case Precision::kFp16: return "fp16";
    case Precision::kTf32: return "tf32";
    case Precision::kFp32: return "fp32";
  }
  return "?";
}

}  // namespace loom
