#include "loom/report/html_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>

#include "loom/atomic_file.h"
#include "loom/error.h"
#include "loom/report/config_legend.h"
#include "loom/report/table.h"
#include "loom/report/timeline_svg.h"

namespace loom {

namespace {

const char* kStyle = R"(
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#1d2330;max-width:1400px}
h1{font-size:22px;margin-bottom:4px} h2{font-size:17px;margin-top:28px;border-bottom:1px solid #dde;padding-bottom:4px}
.sub{color:#5a6275;margin-top:0}
table{border-collapse:collapse;font-size:13px} th,td{padding:4px 9px;border-bottom:1px solid #e4e6ee;text-align:right}
th{background:#f3f4f8} td.l,th.l{text-align:left} tr.best{background:#e8f6ec;font-weight:600}
.legend span{display:inline-block;margin-right:14px;font-size:12px} .sw{display:inline-block;width:11px;height:11px;margin-right:4px;vertical-align:-1px}
svg text{font-family:inherit} .note{font-size:12px;color:#5a6275}
)";

// Colours per action class.

// One line per strategy over the simulated batches (PipeWeaver Fig. 9b's
// dynamic workload shows how each reacts as the data drifts).
std::string IterationChart(const Comparison& c) {
  static const char* kLine[] = {"#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#9d755d", "#bab0ac"};
  double max_t = 0;
  for (const auto& o : c.outcomes) {
    for (double t : o.iteration_times_s) max_t = std::max(max_t, t);
  }
  if (max_t <= 0 || c.iterations < 2) return "";
  const double W = 900, H = 260, left = 60, top = 10, bottom = 30;
  auto x = [&](int i) { return left + (W - left - 10) * i / (c.iterations - 1); };
  auto y = [&](double t) { return top + (H - top - bottom) * (1 - t / max_t); };
  std::string svg = fmt::format("<svg width='{}' height='{}' role=img>", W, H);
  for (int q = 0; q <= 4; ++q) {
    const double t = max_t * q / 4;
    svg += fmt::format(
        "<line x1='{}' x2='{}' y1='{:.1f}' y2='{:.1f}' stroke='#e4e6ee'/><text x='{}' y='{:.1f}' "
        "font-size='11' text-anchor='end' fill='#5a6275'>{:.1f} s</text>",
        left, W - 10, y(t), y(t), left - 6, y(t) + 4, t);
  }
  svg += fmt::format("<text x='{}' y='{}' font-size='11' fill='#5a6275'>iteration (batch) 0 .. {}</text>", left, H - 8,
                     c.iterations - 1);
  std::string legend = "<div class=legend>";
  int line = 0;
  for (const auto& o : c.outcomes) {
    if (!o.ok()) continue;
    const char* color = kLine[line++ % 8];
    std::string points;
    for (size_t i = 0; i < o.iteration_times_s.size(); ++i) {
      points += fmt::format("{:.1f},{:.1f} ", x(static_cast<int>(i)), y(o.iteration_times_s[i]));
    }
    svg += fmt::format("<polyline fill='none' stroke='{}' stroke-width='2' points='{}'><title>{}</title></polyline>",
                       color, points, EscapeXml(o.name));
    legend += fmt::format("<span><i class=sw style='background:{}'></i>{}</span>", color, EscapeXml(o.name));
  }
  return legend + "</div>" + svg + "</svg>";
}

std::string BarChart(const Comparison& c) {
  double max_t = 0;
  int rows = 0;
  for (const auto& o : c.outcomes) {
    if (o.ok()) max_t = std::max(max_t, o.max_iteration_time_s);
    ++rows;
  }
  if (max_t <= 0) return "<p>No strategy found a plan.</p>";
  const int label_w = 110, width = 760, bar_h = 22, gap = 8;
  const int height = rows * (bar_h + gap) + 30;
  std::string svg =
      fmt::format(R"(<svg width="{}" height="{}" xmlns="http://www.w3.org/2000/svg">)", label_w + width + 260, height);
  int y = 4;
  for (int i = 0; i < static_cast<int>(c.outcomes.size()); ++i) {
    const auto& o = c.outcomes[i];
    svg += fmt::format(R"(<text x="{}" y="{}" text-anchor="end" font-size="13">{}</text>)", label_w - 8, y + bar_h - 6,
                       EscapeXml(o.name));
    if (o.ok()) {
      const double w = width * o.mean_iteration_time_s / max_t;
      const double wmax = width * o.max_iteration_time_s / max_t;
      svg += fmt::format(
          R"(<rect x="{}" y="{}" width="{:.1f}" height="{}" fill="{}"><title>{}: mean {:.3f} s, max {:.3f} s</title></rect>)",
          label_w, y, w, bar_h, i == c.best ? "#54a24b" : "#4c78a8", EscapeXml(o.name), o.mean_iteration_time_s,
          o.max_iteration_time_s);
      svg += fmt::format(R"(<line x1="{:.1f}" x2="{:.1f}" y1="{}" y2="{}" stroke="#333" stroke-width="2"/>)",
                         label_w + wmax, label_w + wmax, y + 3, y + bar_h - 3);
      const double s = c.SpeedupOverMegatron(i);
      svg += fmt::format(R"(<text x="{:.1f}" y="{}" font-size="12">{:.3f} s{}</text>)", label_w + wmax + 6,
                         y + bar_h - 6, o.mean_iteration_time_s, s > 0 ? fmt::format("  ({:.2f}x megatron)", s) : "");
    } else {
      svg += fmt::format(R"(<text x="{}" y="{}" font-size="12" fill="#b33">{}</text>)", label_w + 4, y + bar_h - 6,
                         o.not_applicable ? "not applicable" : "no plan fits");
    }
    y += bar_h + gap;
  }
  svg += fmt::format(
      R"(<text x="{}" y="{}" font-size="11" fill="#666">bar: mean iteration time; tick: slowest of the {} batches</text>)",
      label_w, y + 14, c.iterations);
  return svg + "</svg>";
}

std::string Timeline(const StrategyOutcome& o) {
  const PlanRun& run = o.first_run;
  const SimResult& r = run.result;
  const Schedule& s = run.exec.schedule;
  const int ranks = std::min(r.num_ranks(), 64);
  if (r.intervals.empty() || ranks == 0) return "<p class=note>No timeline recorded.</p>";
  const double T = r.iteration_time_s;
  const int p = s.num_ranks;
  std::vector<std::string> names;
  for (int i = 0; i < ranks; ++i) {
    std::string name = run.exec.ranks[i % p].name;
    const int weight = run.costs.replica_weight[i / p];
    if (run.costs.replicas.size() > 1) name = fmt::format("replica {} {}", i / p, name);
    if (weight > 1) name += fmt::format(" (x{} dp)", weight);
    names.push_back(name);
  }
  const std::string svg = TimelineSvg(r, s, names, T);
  std::string more;
  if (r.num_ranks() > ranks) more = fmt::format(" (first {} of {} simulated ranks)", ranks, r.num_ranks());
  return fmt::format(
             "<p class=note>{}: {:.3f} s, bubble {:.1f}%{}. One row per simulated rank (a GPU group of one "
             "unit); grey is idle; the thin lane under each row is its communication stream. Rows of units "
             "that share GPUs in different phases take turns on the same GPUs (the bubble counts the GPU as "
             "busy when either is).</p>",
             EscapeXml(o.name), T, 100 * run.metrics.bubble_ratio, more) +
         svg;
}

std::string MemoryChart(const StrategyOutcome& o, double capacity) {
  const PlanRun& run = o.first_run;
  if (run.group_memory.empty()) return "";
  const double T = run.result.iteration_time_s;
  double top = capacity;
  for (double p : run.group_peak_mem_bytes) top = std::max(top, p);
  top *= 1.05;
  const int left = 60, width = 900, height = 240;
  std::string svg = fmt::format(R"(<svg width="{}" height="{}" xmlns="http://www.w3.org/2000/svg">)",
                                left + width + 330, height + 40);
  auto X = [&](double t) { return left + width * t / T; };
  auto Y = [&](double b) { return 10 + height * (1 - b / top); };
  svg +=
      fmt::format(R"(<rect x="{}" y="10" width="{}" height="{}" fill="#fafbfd" stroke="#ccd"/>)", left, width, height);
  svg += fmt::format(
      R"(<line x1="{}" x2="{}" y1="{:.1f}" y2="{:.1f}" stroke="#c33" stroke-dasharray="5,4"/><text x="{}" y="{:.1f}" font-size="11" fill="#c33">capacity {}</text>)",
      left, left + width, Y(capacity), Y(capacity), left + width + 6, Y(capacity) + 4, HumanBytes(capacity));
  static const char* palette[] = {"#4c78a8", "#f58518", "#54a24b", "#e45756",
                                  "#72b7b2", "#b279a2", "#ff9da6", "#9d755d"};
  const int curves = std::min<int>(static_cast<int>(run.group_memory.size()), 8);
  for (int i = 0; i < curves; ++i) {
    std::string pts;
    double prev = 0;
    for (const auto& pt : run.group_memory[i]) {
      pts += fmt::format("{:.1f},{:.1f} {:.1f},{:.1f} ", X(pt.time_s), Y(prev), X(pt.time_s), Y(pt.bytes));
      prev = pt.bytes;
    }
    pts += fmt::format("{:.1f},{:.1f}", X(T), Y(prev));
    svg +=
        fmt::format(R"(<polyline points="{}" fill="none" stroke="{}" stroke-width="1.5"><title>{}</title></polyline>)",
                    pts, palette[i % 8], EscapeXml(run.group_names[i]));
    svg += fmt::format(R"(<text x="{}" y="{}" font-size="11" fill="{}">{} (peak {})</text>)", left + width + 6,
                       40 + 16 * i, palette[i % 8], EscapeXml(run.group_names[i].substr(0, 34)),
                       HumanBytes(run.group_peak_mem_bytes[i]));
  }
  for (int k = 0; k <= 4; ++k) {
    svg += fmt::format(R"(<text x="{}" y="{:.1f}" font-size="10" text-anchor="end" fill="#555">{}</text>)", left - 4,
                       Y(top * k / 4) + 3, HumanBytes(top * k / 4));
  }
  svg += fmt::format(
      R"(<text x="{}" y="{}" font-size="11" fill="#555">0 s</text><text x="{}" y="{}" font-size="11" text-anchor="end" fill="#555">{:.2f} s</text>)",
      left, height + 28, left + width, height + 28, T);
  return svg + "</svg>";
}

// What the configuration strings mean (report/config_legend.h), as the terminal prints it.
std::string LegendList(const Comparison& c) {
  std::vector<std::string> configs;
  for (const auto& o : c.outcomes) {
    if (o.ok()) configs.push_back(o.result.config);
  }
  const auto legend = ConfigLegend(configs);
  if (legend.empty()) return "";
  std::string h = "<p class=sub>Configuration legend:</p><table class=legend-table>";
  for (const auto& [notation, meaning] : legend) {
    h += fmt::format("<tr><td class=l><code>{}</code></td><td class=l>{}</td></tr>", EscapeXml(notation),
                     EscapeXml(meaning));
  }
  return h + "</table>";
}

std::string Table(const Comparison& c) {
  std::string h =
      "<table><tr><th class=l>strategy</th><th class=l>configuration</th><th>iter mean</th><th>iter max</th>"
      "<th>samples/s</th><th>tokens/s</th><th>MFU</th><th>bubble</th><th>peak mem</th><th>plan time</th>"
      "<th>vs megatron</th></tr>";
  for (int i = 0; i < static_cast<int>(c.outcomes.size()); ++i) {
    const auto& o = c.outcomes[i];
    if (!o.ok()) {
      h += fmt::format("<tr><td class=l>{}</td><td class=l colspan=10>{}: {}</td></tr>", EscapeXml(o.name),
                       o.not_applicable ? "not applicable" : "no plan fits", EscapeXml(o.error));
      continue;
    }
    const double s = c.SpeedupOverMegatron(i);
    h += fmt::format(
        "<tr{}><td class=l>{}{}</td><td class=l>{}</td><td>{:.3f} s</td><td>{:.3f} s</td><td>{:.2f}</td><td>{}</td>"
        "<td>{:.1f}%</td><td>{:.1f}%</td><td>{}</td><td>{:.2f} s</td><td>{}</td></tr>",
        i == c.best ? " class=best" : "", EscapeXml(o.name), i == c.best ? " ★" : "", EscapeXml(o.result.config),
        o.mean_iteration_time_s, o.max_iteration_time_s, o.throughput_samples_per_s,
        HumanCount(o.throughput_tokens_per_s), 100 * o.mfu, 100 * o.bubble_ratio, HumanBytes(o.peak_mem_bytes),
        o.planning_time_s, s > 0 ? fmt::format("{:.2f}x", s) : "-");
  }
  return h + "</table>";
}

// Units (what runs where, with which parallelism) and brokers of one plan.
std::string UnitsTable(const Plan& p) {
  std::string h =
      "<table><tr><th class=l>unit</th><th class=l>modules</th><th>GPUs</th><th>TP</th><th>DP</th><th>PP</th>"
      "<th>microbatches</th><th class=l>schedule</th><th>phase</th><th>SM share</th></tr>";
  for (const auto& u : p.units) {
    const int first_gpu = u.first_group * p.group_gpus;
    const int gpus = u.num_groups() * p.group_gpus;
    std::string modules;
    for (const auto& m : u.modules) modules += (modules.empty() ? "" : ", ") + m;
    std::string pps, mbs, schedules;
    for (const auto& ps : u.pipelines) {
      pps +=
          (pps.empty() ? "" : " / ") + std::to_string(ps.pp) + (ps.vpp() > 1 ? fmt::format(" (vpp {})", ps.vpp()) : "");
      mbs += (mbs.empty() ? "" : " / ") + std::to_string(ps.microbatches);
      schedules += (schedules.empty() ? "" : " / ") + ScheduleKindName(ps.schedule);
    }
    h += fmt::format(
        "<tr><td class=l>{}</td><td class=l>{}</td><td>{} ({}..{})</td><td>{}</td><td>{}</td><td>{}</td>"
        "<td>{}</td><td class=l>{}</td><td>{}</td><td>{:.2f}</td></tr>",
        EscapeXml(u.name), EscapeXml(modules), gpus, first_gpu, first_gpu + gpus - 1, u.tp,
        u.num_replicas() * p.group_gpus / (u.tp * u.cp), pps, mbs, EscapeXml(schedules), u.phase, u.sm_fraction);
  }
  h += "</table>";
  if (!p.brokers.empty()) {
    h += "<p>Brokers: ";
    for (size_t i = 0; i < p.brokers.size(); ++i) {
      h += fmt::format("{}{} &rarr; {} &times;{}", i ? ", " : "", EscapeXml(p.brokers[i].from),
                       EscapeXml(p.brokers[i].to), p.brokers[i].count);
    }
    h += "</p>";
  }
  return h;
}

}  // namespace

std::string HtmlReport(const Comparison& c) {
  std::string html = "<!doctype html><html><head><meta charset=utf-8><title>Loom plan: " + EscapeXml(c.model) +
                     "</title><style>" + kStyle + "</style></head><body>";
  html += fmt::format(
      "<h1>Loom plan: {} on {}</h1><p class=sub>{} GPUs, workload {}, global batch {}, {} simulated "
      "batches per strategy</p>",
      EscapeXml(c.model), EscapeXml(c.cluster), c.num_gpus, EscapeXml(c.workload), c.global_batch, c.iterations);
  if (c.best >= 0) {
    const auto& b = c.outcomes[c.best];
    const double s = c.SpeedupOverMegatron(c.best);
    html += fmt::format("<p><b>Best: {}</b> ({}), {:.3f} s per iteration{}.</p>", EscapeXml(b.name),
                        EscapeXml(b.result.config), b.mean_iteration_time_s,
                        s > 0 && c.best != c.megatron ? fmt::format(", {:.2f}x faster than megatron", s) : "");
  }
  html += "<h2>Strategies</h2>" + Table(c) + LegendList(c);
  html += "<h2>Iteration time</h2>" + BarChart(c);
  if (c.iterations > 1) html += "<h2>Iteration time per batch</h2>" + IterationChart(c);
  html += fmt::format(
      "<h2>Timeline of one iteration</h2><div class=legend><span><i class=sw style='background:{}'></i>forward</span>"
      "<span><i class=sw style='background:{}'></i>backward</span><span><i class=sw style='background:{}'></i>weight "
      "gradient</span><span><i class=sw style='background:{}'></i>send / gradient sync</span><span><i class=sw "
      "style='background:#eceef3'></i>idle</span></div>",
      kTimelineForward, kTimelineBackward, kTimelineWeight, kTimelineComm);
  std::vector<int> shown;
  if (c.best >= 0) shown.push_back(c.best);
  if (c.megatron >= 0 && c.megatron != c.best && c.outcomes[c.megatron].ok()) shown.push_back(c.megatron);
  for (int i : shown) html += "<h3>" + EscapeXml(c.outcomes[i].name) + "</h3>" + Timeline(c.outcomes[i]);
  html += "<h2>Memory per GPU</h2>";
  for (int i : shown) {
    html += "<h3>" + EscapeXml(c.outcomes[i].name) + "</h3>" + MemoryChart(c.outcomes[i], c.gpu_mem_bytes);
  }
  html += "<h2>Units and brokers</h2><p class=sub>DP counts data-parallel ranks (replicas x GPUs per group / TP).</p>";
  for (const auto& o : c.outcomes) {
    if (o.ok()) html += "<h3>" + EscapeXml(o.name) + "</h3>" + UnitsTable(o.result.plan);
  }
  html += "<h2>What each strategy searched</h2><ul>";
  for (const auto& o : c.outcomes) {
    html += fmt::format("<li><b>{}</b>: {}</li>", EscapeXml(o.name),
                        EscapeXml(o.ok() ? o.result.plan.searched : "no plan: " + o.error));
  }
  html +=
      "</ul><p class=note>Generated by Loom. Times are simulated (docs/simulator.md); metrics are defined in "
      "docs/metrics.md.</p></body></html>\n";
  return html;
}

void WriteHtmlReport(const std::string& path, const Comparison& c) {
  try {
    WriteFileAtomically(path, HtmlReport(c));
  } catch (const Error& e) {
    throw Error(fmt::format("--report {}", e.what()));
  }
}

}  // namespace loom
