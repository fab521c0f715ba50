#include "loom/sim/chrome_trace.h"

#include <fmt/format.h>

#include <fstream>

#include "loom/atomic_file.h"
#include "loom/error.h"

namespace loom {

nlohmann::json ChromeTrace(const SimResult& r, const Schedule& s, const std::vector<std::string>& names) {
  using nlohmann::json;
  json events = json::array();
  const int p = s.num_ranks;
  for (int i = 0; i < r.num_ranks(); ++i) {
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", i}, {"args", {{"name", names.at(i)}}}});
    events.push_back({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", i}, {"args", {{"sort_index", i}}}});
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", i}, {"tid", 0}, {"args", {{"name", "compute"}}}});
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", i}, {"tid", 1}, {"args", {{"name", "comm"}}}});
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", i}, {"tid", 2}, {"args", {{"name", "grad-sync"}}}});
  }
  for (const Interval& iv : r.intervals) {
    const Action& a = s.ranks[iv.rank % p][iv.action];
    const char* cat = a.kind == ActionKind::kForward         ? "forward"
                      : a.is_compute()                       ? "backward"
                      : a.kind == ActionKind::kSend          ? "p2p"
                      : a.kind == ActionKind::kOptimizerStep ? "optimizer"
                                                             : "collective";
    events.push_back({{"ph", "X"},
                      {"name", ActionName(a)},
                      {"cat", cat},
                      {"pid", iv.rank},
                      {"tid", iv.stream},
                      {"ts", iv.start_s * 1e6},
                      {"dur", (iv.end_s - iv.start_s) * 1e6},
                      {"args", {{"microbatch", a.microbatch}, {"stage", a.stage}}}});
  }
  for (int i = 0; i < r.num_ranks(); ++i) {
    for (const MemoryPoint& m : r.memory[i]) {
      events.push_back({{"ph", "C"},
                        {"name", "memory GiB"},
                        {"pid", i},
                        {"ts", m.time_s * 1e6},
                        {"args", {{"live", m.bytes / (1024.0 * 1024 * 1024)}}}});
    }
  }
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
}

void WriteChromeTrace(const std::string& path, const nlohmann::json& trace) {
  WriteFileAtomically(path, trace.dump());
}

}  // namespace loom
