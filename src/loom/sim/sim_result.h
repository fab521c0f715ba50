// SimResult: what one simulated iteration produced. Times in seconds, memory
// in bytes, one entry per simulated rank (replica-major: replica * p + rank).
// Metric definitions: docs/metrics.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom {

struct Interval {
  int rank = 0;    // simulated rank (replica * p + pipeline rank)
  int stream = 0;  // 0 compute, 1 communication (sends), 2 gradient sync
  int action = 0;  // index in that pipeline rank's action list
  double start_s = 0;
  double end_s = 0;
};

struct MemoryPoint {
  double time_s = 0;
  double bytes = 0;  // live bytes from this time on
};

struct SimResult {
  double iteration_time_s = 0;
  std::vector<double> busy_s;          // compute-stream busy time per rank
  double bubble_ratio = 0;             // 1 - sum busy / (ranks x iteration time)
  std::vector<double> peak_mem_bytes;  // per rank
  // Per replica and SimOptions::memory_groups entry (replica * groups + g):
  // the peak of the group's summed memory curve.
  std::vector<double> group_peak_mem_bytes;
  std::vector<std::vector<MemoryPoint>> memory;  // per rank, step function; when SimOptions::record_timelines
  std::vector<Interval> intervals;               // when SimOptions::record_timelines
  int64_t events = 0;                            // actions simulated (replicas included)

  double max_peak_mem_bytes() const;
  // Idle share of rank i's compute stream: 1 - busy_s[i] / iteration_time_s.
  double bubble_ratio_of(int i) const { return 1.0 - busy_s[i] / iteration_time_s; }
  int num_ranks() const { return static_cast<int>(busy_s.size()); }
};

// The sum of step functions that each start at time 0 (GPUs shared by ranks).
std::vector<MemoryPoint> SumMemoryCurves(const std::vector<const std::vector<MemoryPoint>*>& curves);

}  // namespace loom
