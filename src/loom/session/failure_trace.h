// Node failures and joins over wall-clock time (Oobleck §2.7, Table 2.2): the
// trace a fault-tolerant training run is replayed against
// (failure_replay.h). Generated from a seed and a mean time between failures
// of the whole cluster (the thesis' 6 h, 1 h and 10 min), or read from a file
// of lines "TIME_S fail|join NODE" ('#' starts a comment).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom {

enum class NodeEvent : uint8_t { kFail = 0, kJoin = 1 };

struct FailureEvent {
  double time_s = 0;
  NodeEvent kind = NodeEvent::kFail;
  int node = 0;
  bool operator==(const FailureEvent&) const = default;
};

// The longest span replayed, and the latest event a trace may give:
// 100,000 hours (11 years), past any training run, so that every time is a
// finite number of seconds a plot can place.
inline constexpr double kMaxReplayHours = 1e5;
inline constexpr double kMaxReplaySeconds = kMaxReplayHours * 3600;

struct FailureTrace {
  int nodes = 0;  // at time 0, ids 0 .. nodes - 1
  double duration_s = 0;
  std::vector<FailureEvent> events;  // by time
};

// Failures with exponential gaps of mean `mtbf_s` (the cluster's, not a
// node's), each on a node drawn uniformly from those alive, until
// `min_nodes` remain (the thesis stops at half); no joins. Deterministic in
// `seed`. Throws loom::Error on non-positive sizes or times.
FailureTrace GenerateFailureTrace(int nodes, double mtbf_s, double duration_s, uint64_t seed, int min_nodes);

// Throws loom::Error naming the file, line and what is wrong (an unknown
// event, a node out of range or already failed, a time that is not a number
// of seconds from 0 to kMaxReplaySeconds, times out of order). Events at or
// after `duration_s` are kept (the replay stops before them).
FailureTrace ReadFailureTrace(const std::string& path, int nodes, double duration_s);

}  // namespace loom
