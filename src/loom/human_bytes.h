// Byte counts for people: every step's messages use it (memory overflows in
// sim/, tables in report/), so it sits beside error.h at the bottom.
#pragma once

#include <string>

namespace loom {

// "12.3 GiB", "512.0 MiB"
std::string HumanBytes(double bytes);

}  // namespace loom
