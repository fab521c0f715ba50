// `loom clusters`: the built-in GPUs' datasheets and the named testbeds.
#pragma once

#include <string>

namespace loom {

// Two tables: one row per built-in GPU (peak, bandwidths, memory, SMs), then
// one per testbed (its GPUs and description), with a line between them on the
// GPU:NODESxPER_NODE form.
std::string FormatClusterList();

}  // namespace loom
