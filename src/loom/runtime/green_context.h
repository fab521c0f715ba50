// Mosaic's multiplexing engine on CUDA (§3.2): SM partitions as green
// contexts, one stream each, created once when a run starts (stream-pool
// pre-creation) and reused every iteration, so a stage change costs a stream
// switch, not a context creation. CUDA builds only (LOOM_HAVE_CUDA); on a CPU
// build the same plans run their co-located modules one after another.
//
// The partition rules come from the driver (cuDeviceGetDevResource: the SM
// count, minSmPartitionSize, smCoscheduledAlignment); a quota that is not a
// partition the device can make is an error, never rounded silently.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "loom/cost/sm_sharing.h"

namespace loom::runtime {

// The device's SM partition rules, read from the driver. Throws loom::Error
// without CUDA or on a driver error.
SmPartitionRules ReadSmPartitionRules(int device);

// Green-context streams on one device, created at construction, in sets: the
// partitions of one set are disjoint (one stage's co-located modules: each
// split is taken from what the previous ones left), different sets reuse the
// SMs (stages run one after another). Splitting the whole device anew for
// every quota would hand two co-located modules the same first SMs.
// Not thread-safe; one per process.
class GreenStreamPool {
 public:
  // sets[s][i]: SMs of partition i of set s (each a partition the device makes;
  // a set's sum at most the device's SMs).
  GreenStreamPool(int device, const std::vector<std::vector<int>>& sets);
  ~GreenStreamPool();
  GreenStreamPool(const GreenStreamPool&) = delete;
  GreenStreamPool& operator=(const GreenStreamPool&) = delete;

  // The stream (a CUstream; c10::cuda::getStreamFromExternal takes it).
  void* Stream(int set, int index) const { return streams_.at(set).at(index); }
  // Seconds the set's green contexts and streams took to create, together.
  double CreationTime_s(int set) const { return creation_s_.at(set); }

 private:
  std::vector<std::vector<void*>> streams_;   // CUstream
  std::vector<std::vector<void*>> contexts_;  // CUgreenCtx
  std::vector<double> creation_s_;
};

// `loom probe-sm`: green-context creation latency per quota, the cost of a
// launch on a pre-created stream, and co-located MLP stacks against the model
// (docs/results/mosaic.md). The report as text.
std::string ProbeSmPartitions(int device, int repeats);

}  // namespace loom::runtime
