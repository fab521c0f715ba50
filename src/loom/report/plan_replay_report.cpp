#include "loom/report/plan_replay_report.h"

#include <fmt/format.h>

#include "loom/human_bytes.h"
#include "loom/report/simulation_report.h"

namespace loom {

namespace {

const char* ScheduleNote(ReplayedSchedule schedule) {
  switch (schedule) {
    case ReplayedSchedule::kPlan:
      return "";
    case ReplayedSchedule::kRecorded:
      return " (its schedule)";
    case ReplayedSchedule::kStrategy:
      return " (the strategy's schedule)";
  }
  return "";
}

}  // namespace

std::string FormatPlanFileReplay(const PlanFileReplay& replay, const std::string& path) {
  const PlanMetrics& m = replay.first.metrics;
  std::string out = fmt::format(
      "plan {} ({}): {:.3f} s per iteration over {} batch(es); batch {}: MFU {:.1f}%, bubble {:.1f}%, peak {} per "
      "GPU\n",
      path, replay.plan.strategy, replay.mean_iteration_time_s, replay.batches.size(), replay.batches[0].iteration,
      100 * m.mfu, 100 * m.bubble_ratio, HumanBytes(m.peak_mem_bytes));
  for (const ReplayedBatch& b : replay.batches) {
    out += fmt::format("  batch {}{}: {:.3f} s", b.iteration, ScheduleNote(b.schedule), b.iteration_time_s);
    if (b.recorded_iteration_time_s > 0) {
      // Exact equality on purpose: a replay of the recorded schedule reproduces the recorded time bit for bit.
      out += b.iteration_time_s == b.recorded_iteration_time_s
                 ? fmt::format(" (recorded {:.3f} s, equal)", b.recorded_iteration_time_s)
                 : fmt::format(" (recorded {:.3f} s, DIFFERS)", b.recorded_iteration_time_s);
    }
    out += "\n";
  }
  return out;
}

nlohmann::json PlanFileReplayJson(const PlanFileReplay& replay) {
  nlohmann::json batches = nlohmann::json::array();
  for (const ReplayedBatch& b : replay.batches) {
    nlohmann::json jb = {{"iteration", b.iteration}, {"iteration_time_s", b.iteration_time_s}};
    if (b.recorded_iteration_time_s > 0) jb["recorded_iteration_time_s"] = b.recorded_iteration_time_s;
    batches.push_back(std::move(jb));
  }
  nlohmann::json j = PlanMetricsJson(replay.first.metrics);
  j["iteration_time_s"] = replay.mean_iteration_time_s;
  j["batches"] = batches;
  return j;
}

}  // namespace loom
