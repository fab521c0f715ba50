// What each step of `loom run` computes, in the simulator's terms: its
// batch's useful FLOPs (model_flops, as MFU counts them: docs/metrics.md) and
// tokens (the busiest module's), so that the launcher reports tokens/s and
// MFU per step. Priced on the launcher, off the workers' critical path; the
// batch of step i is the one the workers draw (same workload, same seed).
// Not thread-safe.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "loom/data/sample_source.h"
#include "loom/plan/plan.h"
#include "loom/spec/cluster.h"
#include "loom/spec/model.h"
#include "loom/spec/workload.h"

namespace loom {

struct StepWork {
  double model_flops = 0;  // useful FLOPs of the step, every GPU
  double tokens = 0;       // the busiest module's tokens
};

class StepMeter {
 public:
  // `schedules`: per step, the strategy's schedule of its batch (absent: the plan's own).
  // The references must outlive the meter.
  StepMeter(const Model& model, const Cluster& cluster, const Workload& workload, const Plan& plan,
            const std::vector<std::optional<IterationSchedule>>& schedules);
  StepWork At(int step) const;
  // The denominator of MFU per second of step: every GPU of the cluster at its
  // peak for the workload's precision (sim/plan_run.cpp's definition).
  double PeakFlopsPerSecond() const;

 private:
  const Model& model_;
  const Cluster& cluster_;
  const Workload& workload_;
  const Plan& plan_;
  const std::vector<std::optional<IterationSchedule>>& schedules_;
  std::unique_ptr<SampleSource> source_;
};

}  // namespace loom
