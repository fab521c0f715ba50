#include "loom/report/timeline_svg.h"

#include <fmt/format.h>

#include <algorithm>

namespace loom {

namespace {

constexpr int kLabelW = 230, kWidth = 1000, kRowH = 18, kCommH = 5;

int Rows(const SimResult& r, int max_rows) { return std::min(r.num_ranks(), max_rows); }
int Height(int rows) { return rows * (kRowH + kCommH + 4) + 34; }

}  // namespace

std::string EscapeXml(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string TimelineSvg(const SimResult& r, const Schedule& s, const std::vector<std::string>& row_names, double axis_s,
                        int max_rows) {
  const int ranks = Rows(r, max_rows);
  const double T = std::max(axis_s, r.iteration_time_s) > 0 ? std::max(axis_s, r.iteration_time_s) : 1.0;
  std::string svg = fmt::format(R"(<svg width="{}" height="{}" xmlns="http://www.w3.org/2000/svg">)",
                                kLabelW + kWidth + 10, Height(ranks));
  auto x_of = [&](double t) { return kLabelW + kWidth * t / T; };
  for (int i = 0; i < ranks; ++i) {
    const int y = i * (kRowH + kCommH + 4) + 4;
    const std::string name = i < static_cast<int>(row_names.size()) ? row_names[i] : fmt::format("rank {}", i);
    svg += fmt::format(R"(<text x="{}" y="{}" text-anchor="end" font-size="11">{}</text>)", kLabelW - 6, y + kRowH - 5,
                       EscapeXml(name));
    svg += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="#eceef3"/>)", kLabelW, y, kWidth, kRowH);
  }
  const int p = s.num_ranks;
  for (const Interval& iv : r.intervals) {
    if (iv.rank >= ranks || iv.end_s <= iv.start_s) continue;
    const Action& a = s.ranks[iv.rank % p][iv.action];
    const int y = iv.rank * (kRowH + kCommH + 4) + 4;
    const char* color = a.kind == ActionKind::kForward                           ? kTimelineForward
                        : a.kind == ActionKind::kBackwardWeight                  ? kTimelineWeight
                        : a.is_compute() || a.kind == ActionKind::kOptimizerStep ? kTimelineBackward
                                                                                 : kTimelineComm;
    const int yy = iv.stream == 0 ? y : y + kRowH + 1;
    const int hh = iv.stream == 0 ? kRowH : kCommH;
    svg += fmt::format(
        R"(<rect x="{:.2f}" y="{}" width="{:.2f}" height="{}" fill="{}" stroke="#fff" stroke-width="0.3"><title>{} {:.3f}-{:.3f} ms</title></rect>)",
        x_of(iv.start_s), yy, std::max(0.3, x_of(iv.end_s) - x_of(iv.start_s)), hh, color, EscapeXml(ActionName(a)),
        1e3 * iv.start_s, 1e3 * iv.end_s);
  }
  const int axis_y = ranks * (kRowH + kCommH + 4) + 16;
  for (int k = 0; k <= 5; ++k) {
    const double t = T * k / 5;
    svg += fmt::format(R"(<text x="{:.1f}" y="{}" font-size="11" text-anchor="middle" fill="#555">{:.3g} s</text>)",
                       x_of(t), axis_y, t);
  }
  return svg + "</svg>";
}

std::string StackedTimelinesSvg(const std::vector<TimelinePanel>& panels) {
  double axis_s = 0;
  int height = 0;
  for (const auto& p : panels) {
    axis_s = std::max(axis_s, p.result->iteration_time_s);
    height += 24 + Height(Rows(*p.result, 64));
  }
  std::string body;
  int y = 0;
  for (const auto& p : panels) {
    body += fmt::format(R"(<text x="8" y="{}" font-size="13" font-weight="600">{}</text>)", y + 17, EscapeXml(p.title));
    std::string inner = TimelineSvg(*p.result, *p.schedule, p.row_names, axis_s);
    inner.insert(4, fmt::format(R"( y="{}")", y + 24));  // place the panel: "<svg" + y
    body += inner;
    y += 24 + Height(Rows(*p.result, 64));
  }
  const std::string legend = fmt::format(
      R"(<g font-size="11"><rect x="{0}" y="{1}" width="10" height="10" fill="{2}"/><text x="{3}" y="{4}">forward</text><rect x="{5}" y="{1}" width="10" height="10" fill="{6}"/><text x="{7}" y="{4}">backward / optimizer</text><rect x="{8}" y="{1}" width="10" height="10" fill="{9}"/><text x="{10}" y="{4}">weight gradient (W)</text><rect x="{11}" y="{1}" width="10" height="10" fill="{12}"/><text x="{13}" y="{4}">communication</text></g>)",
      kLabelW, y + 4, kTimelineForward, kLabelW + 14, y + 13, kLabelW + 90, kTimelineBackward, kLabelW + 104,
      kLabelW + 250, kTimelineWeight, kLabelW + 264, kLabelW + 410, kTimelineComm, kLabelW + 424);
  return fmt::format(R"(<svg width="{}" height="{}" xmlns="http://www.w3.org/2000/svg" font-family="sans-serif">)",
                     kLabelW + kWidth + 10, height + 24) +
         R"(<rect width="100%" height="100%" fill="white"/>)" + body + legend + "</svg>\n";
}

}  // namespace loom
