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

// Green-context streams by SM count on one device, created at construction.
// Not thread-safe; one per process.
class GreenStreamPool {
 public:
  // `sms`: the quotas the plan uses on this device (each a valid partition).
  GreenStreamPool(int device, const std::vector<int>& sms);
  ~GreenStreamPool();
  GreenStreamPool(const GreenStreamPool&) = delete;
  GreenStreamPool& operator=(const GreenStreamPool&) = delete;

  // The stream's CUstream as an integer (c10::cuda::getStreamFromExternal takes it).
  // REQUIRES: sms was given at construction.
  void* Stream(int sms) const;
  // Seconds each green context and its stream took to create.
  double CreationTime_s(int sms) const { return creation_s_.at(sms); }

 private:
  int device_;
  std::map<int, void*> streams_;   // sms -> CUstream
  std::map<int, void*> contexts_;  // sms -> CUgreenCtx
  std::map<int, double> creation_s_;
};

// `loom probe-sm`: green-context creation latency per quota, the cost of a
// launch on a pre-created stream, and co-located MLP stacks against the model
// (docs/results/mosaic.md). The report as text.
std::string ProbeSmPartitions(int device, int repeats);

}  // namespace loom::runtime
