#include "loom/spec/precision.h"

namespace loom {

std::string PrecisionName(Precision p) {
  switch (p) {
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp16:
      return "fp16";
    case Precision::kTf32:
      return "tf32";
    case Precision::kFp32:
      return "fp32";
  }
  return "?";
}

std::optional<Precision> FindPrecision(const std::string& name) {
  for (Precision p : {Precision::kBf16, Precision::kFp16, Precision::kTf32, Precision::kFp32}) {
    if (name == PrecisionName(p)) return p;
  }
  return std::nullopt;
}

}  // namespace loom
