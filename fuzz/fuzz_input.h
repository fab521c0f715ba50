// What every harness shares. A parser's loom::Error is the expected answer to
// bad input; anything else that escapes (std::out_of_range, nlohmann's
// type_error, bad_alloc) reaches libFuzzer as an uncaught exception and is
// reported as a crash, as is every sanitizer report and every input that runs
// past the per-input time limit (scripts/run-fuzzers.sh).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "loom/error.h"

namespace loom::fuzz {

inline std::string Text(const uint8_t* data, size_t size) { return std::string(reinterpret_cast<const char*>(data), size); }

// Runs `f`, swallowing only loom::Error.
template <typename F>
void ExpectOnlyLoomErrors(F&& f) {
  try {
    f();
  } catch (const loom::Error&) {
  }
}

}  // namespace loom::fuzz
