#include "loom/report/comparison.h"

#include <fmt/format.h>

#include <algorithm>

#include "loom/human_bytes.h"
#include "loom/plan/plan_json.h"
#include "loom/report/config_legend.h"
#include "loom/report/table.h"

namespace loom {

namespace {

// The table's width (issue 43: it fits 160 columns): a long line breaks
// between words, its later lines indented by `indent`.
constexpr size_t kTableWidth = 158;
std::string WrapWords(const std::string& text, size_t width, const std::string& indent) {
  std::string out, line;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find(' ', at);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(at, end - at);
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      out += line + "\n";
      line = indent;
    }
    line += (line.empty() || line == indent ? "" : " ") + word;
    at = end + 1;
  }
  return out + line + "\n";
}

}  // namespace

std::string FormatComparison(const Comparison& c, bool wide) {
  std::string out = fmt::format("{} on {} ({} GPUs), workload {}, global batch {}, {} simulated batches\n\n", c.model,
                                c.cluster, c.num_gpus, c.workload, c.global_batch, c.iterations);
  // The default table fits 160 columns: configurations cut to kConfigWidth,
  // without the worst iteration and the planning time (--wide has them).
  std::vector<std::string> header = {"", "strategy", "configuration", "iter mean"};
  if (wide) header.push_back("iter max");
  for (const char* h : {"samples/s", "tokens/s", "MFU", "bubble", "peak mem"}) header.push_back(h);
  if (wide) header.push_back("plan time");
  header.push_back("vs megatron");
  TextTable t(header);
  bool cut = false;
  std::vector<std::string> configs;
  for (int i = 0; i < static_cast<int>(c.outcomes.size()); ++i) {
    const auto& o = c.outcomes[i];
    std::vector<std::string> row;
    if (!o.ok()) {
      row = {"", o.name, o.not_applicable ? "not applicable (see below)" : "no plan fits (see below)", "-"};
      if (wide) row.push_back("-");
      for (int k = 0; k < 5; ++k) row.push_back("-");
      if (wide) row.push_back(fmt::format("{:.2f} s", o.planning_time_s));
      row.push_back("-");
      t.AddRow(row);
      continue;
    }
    configs.push_back(o.result.config);
    const std::string config = wide ? o.result.config : CutToWidth(o.result.config, kConfigWidth);
    cut = cut || config != o.result.config;
    const double speedup = c.SpeedupOverMegatron(i);
    row = {i == c.best ? "*" : "", o.name, config, fmt::format("{:.3f} s", o.mean_iteration_time_s)};
    if (wide) row.push_back(fmt::format("{:.3f} s", o.max_iteration_time_s));
    for (std::string cell : {fmt::format("{:.1f}", o.throughput_samples_per_s), HumanCount(o.throughput_tokens_per_s),
                             fmt::format("{:.1f}%", 100 * o.mfu), fmt::format("{:.1f}%", 100 * o.bubble_ratio),
                             HumanBytes(o.peak_mem_bytes) + (o.memory_violations.empty() ? "" : " !")}) {
      row.push_back(std::move(cell));
    }
    if (wide) row.push_back(fmt::format("{:.2f} s", o.planning_time_s));
    row.push_back(speedup > 0 ? fmt::format("{:.2f}x", speedup) : "-");
    t.AddRow(row);
  }
  out += t.Render();
  // What the configurations say, for the notations they use.
  const auto legend = ConfigLegend(configs);
  if (!legend.empty()) {
    out += "\nconfiguration legend" + std::string(cut ? " (\"...\": cut; --wide shows it whole)" : "") + ":\n";
    size_t w = 0;
    for (const auto& [notation, meaning] : legend) w = std::max(w, notation.size());
    // Meanings wrapped at word boundaries to keep within 160 columns.
    const size_t room = 160 - 4 - w;
    for (const auto& [notation, meaning] : legend) {
      std::string line, first = notation;
      size_t at = 0;
      while (at < meaning.size()) {
        size_t end = std::min(meaning.size(), at + room);
        if (end < meaning.size()) {
          const size_t space = meaning.rfind(' ', end);
          if (space != std::string::npos && space > at) end = space;
        }
        out += fmt::format("  {:<{}}  {}\n", first, w, meaning.substr(at, end - at));
        first.clear();
        at = end < meaning.size() && meaning[end] == ' ' ? end + 1 : end;
      }
    }
  }
  if (c.best >= 0) {
    const auto& b = c.outcomes[c.best];
    out += fmt::format("\n* best: {} ({}), {:.3f} s per iteration", b.name, b.result.config, b.mean_iteration_time_s);
    const double s = c.SpeedupOverMegatron(c.best);
    if (s > 0 && c.best != c.megatron) out += fmt::format(", {:.2f}x megatron", s);
    out += "\n";
    // Issue 20: a batch far too small for the cluster leaves even the best plan
    // mostly idle; say so, with a batch that fills its pipelines (1F1B's bubble
    // is (p - 1) / (m + p - 1): m >= 4 p keeps it under about 20%).
    if (b.bubble_ratio > 0.5) {
      int pp = 1, m = 0;
      for (const auto& u : b.result.plan.units) {
        for (const auto& p : u.pipelines) {
          pp = std::max(pp, p.pp);
          m = m == 0 ? p.microbatches : std::min(m, p.microbatches);
        }
      }
      const int64_t factor = m > 0 ? (4 * pp + m - 1) / m : 1;
      out += fmt::format(
          "warning: the best plan idles {:.0f}% of the time (MFU {:.1f}%): a global batch of {} is small "
          "for {} GPUs{}\n",
          100 * b.bubble_ratio, 100 * b.mfu, c.global_batch, c.num_gpus,
          factor > 1 ? fmt::format("; {} ({} microbatches per replica for its {} stages) would fill "
                                   "its pipelines",
                                   c.global_batch * factor, m * factor, pp)
                     : "");
    }
  }
  // Why each strategy has no plan; strategies with the same reason on one line.
  std::vector<std::pair<std::string, std::vector<std::string>>> reasons;  // "not applicable: why" -> names
  for (const auto& o : c.outcomes) {
    if (o.ok()) continue;
    const std::string why = (o.not_applicable ? "not applicable: " : "no plan fits: ") + o.error;
    auto it = std::find_if(reasons.begin(), reasons.end(), [&](const auto& r) { return r.first == why; });
    if (it == reasons.end()) {
      reasons.push_back({why, {o.name}});
    } else {
      it->second.push_back(o.name);
    }
  }
  for (const auto& [why, names] : reasons) out += fmt::format("\n{}: {}\n", fmt::join(names, ", "), why);
  for (const auto& o : c.outcomes) {
    if (o.overflow_batches > 0) {
      out += "\n" + WrapWords(fmt::format("{} ! plans on batch 0 but overflows on {} later batch(es), first: {}",
                                          o.name, o.overflow_batches, o.memory_violations.front()),
                              kTableWidth, "    ");
    }
  }
  return out;
}

nlohmann::json ComparisonJson(const Comparison& c) {
  nlohmann::json strategies = nlohmann::json::array();
  for (int i = 0; i < static_cast<int>(c.outcomes.size()); ++i) {
    const auto& o = c.outcomes[i];
    nlohmann::json s = {{"name", o.name}, {"planning_time_s", o.planning_time_s}};
    if (!o.ok()) {
      s["error"] = o.error;
      s["not_applicable"] = o.not_applicable;
    } else {
      s.update({{"config", o.result.config},
                {"iteration_time_s", o.mean_iteration_time_s},
                {"max_iteration_time_s", o.max_iteration_time_s},
                {"iteration_times_s", o.iteration_times_s},
                {"throughput_samples_per_s", o.throughput_samples_per_s},
                {"throughput_tokens_per_s", o.throughput_tokens_per_s},
                {"mfu", o.mfu},
                {"bubble_ratio", o.bubble_ratio},
                {"peak_mem_bytes", o.peak_mem_bytes},
                {"speedup_over_megatron", c.SpeedupOverMegatron(i)},
                {"candidates", o.result.candidates},
                {"batch_schedule_time_s", o.batch_schedule_time_s},
                {"memory_violations", o.memory_violations},
                {"plan", PlanToJson(o.result.plan)}});
      nlohmann::json batches = nlohmann::json::array();
      for (const auto& b : o.batches) {
        nlohmann::json jb = {{"iteration", b.iteration}, {"iteration_time_s", b.iteration_time_s}};
        if (b.schedule) jb["schedule"] = IterationScheduleToJson(*b.schedule);
        batches.push_back(std::move(jb));
      }
      s["batches"] = std::move(batches);
    }
    strategies.push_back(std::move(s));
  }
  return {{"model", c.model},
          {"cluster", c.cluster},
          {"workload", c.workload},
          {"global_batch", c.global_batch},
          {"iterations", c.iterations},
          {"best", c.best >= 0 ? nlohmann::json(c.outcomes[c.best].name) : nlohmann::json(nullptr)},
          {"strategies", strategies}};
}

}  // namespace loom
