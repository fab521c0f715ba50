#include "loom/report/table.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

namespace loom {

namespace {

bool LooksNumeric(const std::string& s) {
  return !s.empty() && (std::isdigit(static_cast<unsigned char>(s[0])) || (s[0] == '-' && s.size() > 1) || s[0] == '.');
}

}  // namespace

std::string TextTable::Render() const {
  std::vector<size_t> width(header_.size(), 0);
  for (size_t c = 0; c < header_.size(); ++c) {
    width[c] = header_[c].size();
  }
  for (const auto& r : rows_) {
    for (size_t c = 0; c < r.size() && c < width.size(); ++c) {
      width[c] = std::max(width[c], r[c].size());
    }
  }
  auto line = [&](const std::vector<std::string>& r) {
    std::string out;
    for (size_t c = 0; c < width.size(); ++c) {
      std::string cell = c < r.size() ? r[c] : "";
      out += c ? "  " : "";
      out += LooksNumeric(cell) ? fmt::format("{:>{}}", cell, width[c]) : fmt::format("{:<{}}", cell, width[c]);
    }
    while (!out.empty() && out.back() == ' ') {
      out.pop_back();
    }
    return out + "\n";
  };
  std::string rule;
  for (size_t c = 0; c < width.size(); ++c) {
    rule += (c ? "  " : "") + std::string(width[c], '-');
  }
  std::string out = line(header_) + rule + "\n";
  for (const auto& r : rows_) {
    out += r.empty() ? rule + "\n" : line(r);
  }
  return out;
}

std::string HumanCount(double n) {
  if (n >= 1e12) return fmt::format("{:.2f}T", n / 1e12);
  if (n >= 1e9) return fmt::format("{:.2f}B", n / 1e9);
  if (n >= 1e6) return fmt::format("{:.1f}M", n / 1e6);
  if (n >= 1e3) return fmt::format("{:.1f}K", n / 1e3);
  return fmt::format("{:.0f}", n);
}

}  // namespace loom
