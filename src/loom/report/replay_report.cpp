#include "loom/report/replay_report.h"

#include <fmt/format.h>

#include <algorithm>

#include "loom/report/table.h"

namespace loom {

namespace {

constexpr size_t kStoppedWidth = 60;  // the table's "stopped" column

std::string Cut(const std::string& why) {
  return why.size() <= kStoppedWidth ? why : why.substr(0, kStoppedWidth - 3) + "...";
}

}  // namespace

std::string FormatReplay(const std::string& model, const std::string& cluster, const FailureTrace& trace,
                         const std::vector<SystemReplay>& replays) {
  int fails = 0;
  for (const auto& e : trace.events) fails += e.kind == NodeEvent::kFail && e.time_s < trace.duration_s;
  std::string out = fmt::format("{} on {} ({} nodes), {:.1f} h, {} node failures\n\n", model, cluster, trace.nodes,
                                trace.duration_s / 3600, fails);
  TextTable t({"system", "no failures", "over the trace", "kept", "failures", "lost per failure", "stopped"});
  for (const auto& r : replays) {
    double lost = 0;
    int n = 0;
    for (const auto& e : r.events) {
      if (e.what.rfind("node joined", 0) == 0) continue;
      lost += e.lost_s;
      ++n;
    }
    t.AddRow({r.system, fmt::format("{:.2f} samples/s", r.healthy_samples_per_s),
              fmt::format("{:.2f} samples/s", r.mean_samples_per_s),
              r.healthy_samples_per_s > 0 ? fmt::format("{:.0f}%", 100 * r.mean_samples_per_s / r.healthy_samples_per_s)
                                          : "-",
              std::to_string(n), n > 0 ? fmt::format("{:.1f} s", lost / n) : "-",
              r.stopped.empty() ? "no" : Cut(r.stopped)});
  }
  out += t.Render();
  // A reason the table cut is given whole below it.
  for (const auto& r : replays) {
    if (r.stopped.size() > kStoppedWidth) out += fmt::format("{} stopped {}\n", r.system, r.stopped);
  }
  return out;
}

nlohmann::json ReplayJson(const FailureTrace& trace, const std::vector<SystemReplay>& replays) {
  nlohmann::json events = nlohmann::json::array();
  for (const auto& e : trace.events) {
    events.push_back({{"time_s", e.time_s}, {"event", e.kind == NodeEvent::kFail ? "fail" : "join"}, {"node", e.node}});
  }
  nlohmann::json systems = nlohmann::json::array();
  for (const auto& r : replays) {
    nlohmann::json tl = nlohmann::json::array(), ev = nlohmann::json::array();
    for (const auto& s : r.timeline) {
      tl.push_back(
          {{"start_s", s.start_s}, {"end_s", s.end_s}, {"nodes", s.nodes}, {"samples_per_s", s.samples_per_s}});
    }
    for (const auto& e : r.events) {
      ev.push_back({{"time_s", e.time_s}, {"node", e.node}, {"lost_s", e.lost_s}, {"what", e.what}});
    }
    systems.push_back({{"system", r.system},
                       {"healthy_samples_per_s", r.healthy_samples_per_s},
                       {"mean_samples_per_s", r.mean_samples_per_s},
                       {"stopped", r.stopped},
                       {"timeline", tl},
                       {"events", ev}});
  }
  return {{"nodes", trace.nodes}, {"duration_s", trace.duration_s}, {"trace", events}, {"systems", systems}};
}

std::string ReplaySvg(const FailureTrace& trace, const std::vector<SystemReplay>& replays) {
  const double W = 900, H = 360, left = 70, right = 150, top = 20, bottom = 40;
  double top_rate = 0;
  for (const auto& r : replays) {
    for (const auto& s : r.timeline) top_rate = std::max(top_rate, s.samples_per_s);
  }
  if (top_rate <= 0) top_rate = 1;
  const double hours = trace.duration_s / 3600;
  auto x = [&](double t_s) { return left + (W - left - right) * t_s / trace.duration_s; };
  auto y = [&](double rate) { return top + (H - top - bottom) * (1 - rate / (1.1 * top_rate)); };
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" "
      "font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      W, H);
  // Axes, ticks every hour (or every tenth of the span), failures as grey marks.
  svg += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"black\"/>\n", left, H - bottom,
                     W - right);
  svg += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"black\"/>\n", left, top, H - bottom);
  // At most 13 ticks, counted (a sum of steps never reaching a span past
  // doubles' precision would not end).
  const double step_h = hours <= 12 ? 1 : std::ceil(hours / 12);
  const int ticks = static_cast<int>(std::min(12.0, std::floor(hours / step_h + 1e-9)));
  for (int k = 0; k <= ticks; ++k) {
    const double h = k * step_h;
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{:g} h</text>\n", x(h * 3600),
                       H - bottom + 16, h);
  }
  for (int k = 0; k <= 4; ++k) {
    const double rate = 1.1 * top_rate * k / 4;
    svg +=
        fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{:.3g}</text>\n", left - 6, y(rate) + 4, rate);
  }
  svg += fmt::format(
      "<text x=\"14\" y=\"{:.1f}\" transform=\"rotate(-90 14 {:.1f})\" text-anchor=\"middle\">samples/s</text>\n",
      (top + H - bottom) / 2, (top + H - bottom) / 2);
  for (const auto& e : trace.events) {
    if (e.time_s >= trace.duration_s) continue;
    svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#ccc\"/>\n", x(e.time_s),
                       top, H - bottom);
  }
  const char* colors[] = {"#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e"};
  for (size_t i = 0; i < replays.size(); ++i) {
    std::string points;
    for (const auto& s : replays[i].timeline) {
      points +=
          fmt::format("{:.1f},{:.1f} {:.1f},{:.1f} ", x(s.start_s), y(s.samples_per_s), x(s.end_s), y(s.samples_per_s));
    }
    const char* c = colors[i % 5];
    svg += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\" points=\"{}\"/>\n", c, points);
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" fill=\"{}\">{} ({:.3g}/s)</text>\n", W - right + 8,
                       top + 16 + 18 * i, c, replays[i].system, replays[i].mean_samples_per_s);
  }
  return svg + "</svg>\n";
}

namespace {

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') {
      out += "&lt;";
    } else if (c == '>') {
      out += "&gt;";
    } else if (c == '&') {
      out += "&amp;";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string ReplayHtml(const std::string& model, const std::string& cluster, const FailureTrace& trace,
                       const std::vector<SystemReplay>& replays) {
  std::string html = fmt::format(
      "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>Loom replay: {} on {}</title>\n"
      "<style>body{{font-family:sans-serif;margin:2em;max-width:1000px}} pre{{background:#f6f6f6;padding:1em}} "
      "table{{border-collapse:collapse}} td,th{{border:1px solid #ccc;padding:2px 8px;text-align:right}}</style>"
      "</head><body>\n<h1>Training over node failures: {} on {}</h1>\n"
      "<p>Samples/s over wall-clock time, each system re-planned by Loom on the nodes left and timed by the "
      "simulator (docs/cli.md, <code>loom replay</code>). Grey lines are failures.</p>\n",
      Escape(model), Escape(cluster), Escape(model), Escape(cluster));
  html += ReplaySvg(trace, replays);
  html += "<pre>" + Escape(FormatReplay(model, cluster, trace, replays)) + "</pre>\n";
  for (const auto& r : replays) {
    html += fmt::format("<h2>{}</h2>\n", Escape(r.system));
    if (!r.stopped.empty()) html += "<p>Stopped " + Escape(r.stopped) + "</p>\n";
    html += "<table><tr><th>time</th><th>node</th><th>lost</th><th>what</th></tr>\n";
    for (const auto& e : r.events) {
      html +=
          fmt::format("<tr><td>{:.0f} s</td><td>{}</td><td>{:.1f} s</td><td style=\"text-align:left\">{}</td></tr>\n",
                      e.time_s, e.node, e.lost_s, Escape(e.what));
    }
    html += "</table>\n";
  }
  return html + "</body></html>\n";
}

}  // namespace loom
