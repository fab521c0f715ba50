// The number format a run trains in. bf16 / fp16 are mixed precision as
// Megatron-LM runs it (16-bit weights and activations, fp32 main gradients,
// master weights and Adam state); tf32 and fp32 keep everything in 32 bits
// (Oobleck's baselines train without mixed precision), tf32 running matrix
// products on tensor cores at reduced mantissa. Stored by name in workload
// files: append, never renumber.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace loom {

enum class Precision : uint8_t { kBf16 = 0, kFp16 = 1, kTf32 = 2, kFp32 = 3 };

// "bf16", "fp16", "tf32", "fp32".
std::string PrecisionName(Precision p);
// The precision PrecisionName calls `name`; nullopt for any other text.
std::optional<Precision> FindPrecision(const std::string& name);
// Bytes of one activation, gradient or weight element.
inline double ElementBytes(Precision p) { return p == Precision::kBf16 || p == Precision::kFp16 ? 2.0 : 4.0; }
inline bool IsMixedPrecision(Precision p) { return ElementBytes(p) == 2.0; }

}  // namespace loom
