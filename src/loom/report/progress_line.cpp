#include "loom/report/progress_line.h"

#include <fmt/format.h>

namespace loom {

namespace {

std::string Seconds(double s) { return s < 10 ? fmt::format("{:.1f} s", s) : fmt::format("{:.0f} s", s); }

}  // namespace

std::string FormatProgress(const Progress& p) {
  std::string line =
      p.total > 0 ? fmt::format("{} {} of {}", p.what, p.done, p.total) : fmt::format("{} {}", p.what, p.done);
  if (p.elapsed_s > 0) {
    line += fmt::format(", {} elapsed", Seconds(p.elapsed_s));
    // `done` counts the unit in progress: done - 1 are finished.
    if (p.total > 0 && p.done >= 2 && p.done <= p.total) {
      const double finished = static_cast<double>(p.done - 1);
      line +=
          fmt::format(", about {} left", Seconds(p.elapsed_s / finished * static_cast<double>(p.total - p.done + 1)));
    }
  }
  return line;
}

}  // namespace loom
