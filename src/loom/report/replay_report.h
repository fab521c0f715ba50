// What `loom replay` shows (docs/cli.md, "loom replay"): a table of every
// system's samples/s without and with the failures, the failures it saw and
// the mean time each cost; a JSON form with the timelines and events; an SVG
// plot of samples/s over wall-clock time, one line per system; and an HTML
// report holding both.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "loom/session/failure_replay.h"

namespace loom {

std::string FormatReplay(const std::string& model, const std::string& cluster, const FailureTrace& trace,
                         const std::vector<SystemReplay>& replays);
nlohmann::json ReplayJson(const FailureTrace& trace, const std::vector<SystemReplay>& replays);
std::string ReplaySvg(const FailureTrace& trace, const std::vector<SystemReplay>& replays);
// A self-contained HTML page: the table, the plot, and every system's events.
std::string ReplayHtml(const std::string& model, const std::string& cluster, const FailureTrace& trace,
                       const std::vector<SystemReplay>& replays);

}  // namespace loom
