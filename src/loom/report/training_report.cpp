#include "loom/report/training_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "loom/error.h"
#include "loom/report/timeline_svg.h"

namespace loom {

namespace {

nlohmann::json FiniteOrNull(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

std::string ShortDuration(double s) {
  if (s < 90) return fmt::format("{:.0f} s", s);
  if (s < 5400) return fmt::format("{:.0f} min", s / 60);
  return fmt::format("{:.1f} h", s / 3600);
}

// One chart: `value` of each record against its step; finite values only,
// skipped steps as red marks on the axis.
std::string StepChart(const std::string& label, const std::vector<StepRecord>& records,
                      const std::function<double(const StepRecord&)>& value) {
  constexpr double W = 460, H = 220, left = 60, right = 12, top = 24, bottom = 32;
  double lo = INFINITY, hi = -INFINITY;
  int first = records.empty() ? 0 : records.front().step, last = first;
  for (const auto& r : records) {
    last = std::max(last, r.step);
    const double v = value(r);
    if (!std::isfinite(v)) continue;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" "
      "font-size=\"11\">\n<text x=\"{}\" y=\"15\" font-weight=\"bold\">{}</text>\n",
      W, H, left, EscapeXml(label));
  if (!(hi >= lo)) return svg + fmt::format("<text x=\"{}\" y=\"{}\">no values</text>\n</svg>\n", left, H / 2);
  if (hi == lo) {
    hi += std::max(1e-12, std::abs(hi) * 0.05);
    lo -= std::max(1e-12, std::abs(lo) * 0.05);
  }
  const double span = std::max(1, last - first);
  auto x = [&](double step) { return left + (step - first) / span * (W - left - right); };
  auto y = [&](double v) { return H - bottom - (v - lo) / (hi - lo) * (H - top - bottom); };
  svg += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"black\"/>\n", left, H - bottom,
                     W - right);
  svg += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"black\"/>\n", left, top, H - bottom);
  for (int k = 0; k <= 4; ++k) {
    const double v = lo + (hi - lo) * k / 4;
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{:.3g}</text>\n", left - 5, y(v) + 4, v);
    const double s = first + span * k / 4;
    svg +=
        fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{:.0f}</text>\n", x(s), H - bottom + 14, s);
  }
  svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">step</text>\n", (left + W - right) / 2,
                     H - 4);
  std::string points;
  for (const auto& r : records) {
    const double v = value(r);
    if (std::isfinite(v)) points += fmt::format("{:.1f},{:.1f} ", x(r.step), y(v));
    if (r.skipped) {
      svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#d62728\"/>\n", x(r.step),
                         H - bottom - 6, H - bottom);
    }
  }
  svg += fmt::format("<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\"{}\"/>\n", points);
  return svg + "</svg>\n";
}

}  // namespace

nlohmann::json StepRecordJson(const StepRecord& r) {
  nlohmann::json j;
  j["step"] = r.step;
  j["loss"] = FiniteOrNull(r.loss);
  j["grad_norm"] = FiniteOrNull(r.grad_norm);
  j["lr"] = FiniteOrNull(r.lr);
  j["skipped"] = r.skipped;
  j["step_s"] = FiniteOrNull(r.step_s);
  j["tokens"] = FiniteOrNull(r.tokens);
  j["tokens_per_s"] = FiniteOrNull(r.step_s > 0 ? r.tokens / r.step_s : NAN);
  j["model_flops"] = FiniteOrNull(r.model_flops);
  j["mfu"] = FiniteOrNull(r.mfu);
  j["elapsed_s"] = FiniteOrNull(r.elapsed_s);
  j["data_wait_s"] = FiniteOrNull(r.data_wait_s);
  j["data_load_s"] = FiniteOrNull(r.data_load_s);
  return j;
}

StepRecord StepRecordFromJson(const std::string& line, const std::string& where) {
  StepRecord r;
  try {
    const nlohmann::json j = nlohmann::json::parse(line);
    auto number = [&](const char* key) { return j.contains(key) && j[key].is_number() ? j[key].get<double>() : NAN; };
    r.step = j.at("step").get<int>();
    r.loss = number("loss");
    r.grad_norm = number("grad_norm");
    r.lr = number("lr");
    r.skipped = j.value("skipped", false);
    r.step_s = number("step_s");
    r.tokens = number("tokens");
    r.model_flops = number("model_flops");
    r.mfu = number("mfu");
    r.elapsed_s = number("elapsed_s");
    r.data_wait_s = number("data_wait_s");
    r.data_load_s = number("data_load_s");
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: not a metrics line ({}); expected {{\"step\": N, \"loss\": ...}}", where, e.what()));
  }
  return r;
}

std::string FormatStepLine(const StepRecord& r, int steps, const std::vector<StepRecord>& done) {
  std::string line = fmt::format("step {}/{}  loss {:.4f}  grad {:.3g}  lr {:.2e}  {:.2f} s  {:.0f} tok/s", r.step + 1,
                                 steps, r.loss, r.grad_norm, r.lr, r.step_s, r.step_s > 0 ? r.tokens / r.step_s : 0.0);
  if (std::isfinite(r.mfu)) line += fmt::format("  MFU {:.1f}%", 100 * r.mfu);
  if (r.skipped) line += "  SKIPPED (not finite)";
  double after_first_s = 0;
  int counted = 0;
  for (size_t i = 1; i < done.size(); ++i) {
    after_first_s += done[i].step_s;
    ++counted;
  }
  const int left = steps - r.step - 1;
  if (counted > 0 && left > 0) line += "  ETA " + ShortDuration(after_first_s / counted * left);
  return line;
}

std::string TrainingReportHtml(const std::string& title, const std::vector<StepRecord>& records) {
  int skipped = 0;
  double tokens = 0, seconds = 0;
  for (const auto& r : records) {
    skipped += r.skipped ? 1 : 0;
    tokens += r.tokens;
    seconds += r.step_s;
  }
  std::string html = fmt::format(
      "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{0}</title>\n"
      "<style>body{{font-family:sans-serif;margin:24px}} .charts{{display:flex;flex-wrap:wrap;gap:12px}}"
      " td,th{{padding:2px 10px;text-align:right}}</style></head><body>\n<h1>{0}</h1>\n",
      EscapeXml(title));
  html +=
      "<table><tr><th>steps</th><th>first loss</th><th>last loss</th><th>skipped</th><th>tokens/s</th>"
      "<th>wall time</th></tr>\n";
  const auto first = records.empty() ? StepRecord{} : records.front();
  const auto last = records.empty() ? StepRecord{} : records.back();
  html +=
      fmt::format("<tr><td>{}</td><td>{:.4f}</td><td>{:.4f}</td><td>{}</td><td>{:.0f}</td><td>{}</td></tr></table>\n",
                  records.size(), first.loss, last.loss, skipped, seconds > 0 ? tokens / seconds : 0.0,
                  ShortDuration(last.elapsed_s));
  html += "<div class=\"charts\">\n";
  html += StepChart("loss", records, [](const StepRecord& r) { return r.loss; });
  html += StepChart("gradient norm (before clipping)", records, [](const StepRecord& r) { return r.grad_norm; });
  html += StepChart("learning rate", records, [](const StepRecord& r) { return r.lr; });
  html += StepChart("tokens/s", records, [](const StepRecord& r) { return r.step_s > 0 ? r.tokens / r.step_s : NAN; });
  html += "</div>\n</body></html>\n";
  return html;
}

}  // namespace loom
