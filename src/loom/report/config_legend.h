// What the configuration strings of `loom plan`'s table mean ("tp2 pp1 dp8 m4
// 1f1b rc=full", "vision:K4B1", "d8 100%", "f=0 1 x (...)"): one line per
// notation that the configurations shown use, for the terminal and the HTML
// report alike (issue 43: the strings had no legend anywhere).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace loom {

// (notation, meaning) for each notation that some string of `configs` uses,
// in a fixed order.
std::vector<std::pair<std::string, std::string>> ConfigLegend(const std::vector<std::string>& configs);

// `text` cut to `width` characters, ending in "..." where it was cut.
std::string CutToWidth(const std::string& text, size_t width);

}  // namespace loom
