#include "loom/report/progress_line.h"

#include <fmt/format.h>

namespace loom {

namespace {

std::string Seconds(double s) { return s < 10 ? fmt::format("{:.1f} s", s) : fmt::format("{:.0f} s", s); }

}  // namespace

std::string FormatProgress(const Progress& p) {
  std::string line = p.total > 0 ? fmt::format("{} {} of {}", p.what, p.done, p.total) : fmt::format("{} {}", p.what, p.done);
  if (p.elapsed_s > 0) {
    line += fmt::format(", {} elapsed", Seconds(p.elapsed_s));
    if (p.total > 0 && p.done > 0 && p.done < p.total) {
      line += fmt::format(", about {} left", Seconds(p.elapsed_s * static_cast<double>(p.total - p.done) /
                                                     static_cast<double>(p.done)));
    }
  }
  return line;
}

}  // namespace loom
