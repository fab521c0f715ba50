// Timelines as SVG: one row per rank of a simulated (or measured: the runtime
// reports what ran as a SimResult) iteration, actions coloured by kind, the
// communication stream as a thin lane under each row. The HTML report draws
// the chosen plan with it; `loom run --timeline` draws the run under its
// prediction on one time axis.
#pragma once

#include <string>
#include <vector>

#include "loom/pipeline/schedule.h"
#include "loom/sim/simulator.h"

namespace loom {

// Colours of the kinds (forward, backward, weight gradient, communication).
inline constexpr const char* kTimelineForward = "#4c78a8";
inline constexpr const char* kTimelineBackward = "#f58518";
inline constexpr const char* kTimelineWeight = "#e4a73b";
inline constexpr const char* kTimelineComm = "#8e6bbf";

// An <svg> element of `result`'s first `max_rows` ranks, `row_names[i]`
// labelling row i; the axis spans 0..axis_s (at least the iteration).
// Interval i's action is schedule.ranks[rank % schedule.num_ranks][action].
std::string TimelineSvg(const SimResult& result, const Schedule& schedule, const std::vector<std::string>& row_names,
                        double axis_s, int max_rows = 64);

// One SVG document: each titled panel's timeline, stacked on a shared axis.
struct TimelinePanel {
  std::string title;
  const SimResult* result = nullptr;
  const Schedule* schedule = nullptr;
  std::vector<std::string> row_names;
};
std::string StackedTimelinesSvg(const std::vector<TimelinePanel>& panels);

std::string EscapeXml(const std::string& text);

}  // namespace loom
