// When and where a worker's actions run on its device, behind one interface
// so that the step executor has no device branches: the host clock times
// actions by the wall clock; on CUDA (cuda_action_clock.cpp) the host only
// enqueues, so compute actions are timed by events on their streams, and
// Mosaic's engine runs each co-located rank's compute on its own
// green-context stream.
// Only runtime translation units include this header (it includes libtorch).
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "loom/pipeline/schedule.h"
#include "loom/plan/execution_plan.h"
#include "loom/runtime/message_routing.h"
#include "loom/runtime/process_layout.h"
#include "loom/runtime/worker_message.h"

namespace loom::runtime {

// Where a clock's lines go: `step` lines belong to the step (a fault-tolerant
// run holds them until the step commits); `now` lines are notes sent at once.
struct ClockReports {
  std::function<void(const WorkerMessage&)> step, now;
};

// Times one process's actions, step by step. The last step's intervals are
// reported for the trace from the process's shard 0 (report::Interval;
// stream 1: the communication stream), times from the step's start. Not thread-safe.
class ActionClock {
 public:
  virtual ~ActionClock() = default;
  // A step starts; `last_step`: its intervals are reported.
  virtual void StartStep(bool last_step) = 0;
  // Around action `index` of rank `r` (the optimizer steps excepted: they run
  // after every other action, between BeginOptimizerSteps and EndOptimizerSteps).
  virtual void BeginAction(int r, int index, const Action& a, const Schedule& sch, const StepEdges& edges) = 0;
  virtual void EndAction() = 0;
  // Every action is issued; what the optimizer steps need must be done.
  virtual void ActionsDone() = 0;
  // The optimizer steps of (rank, action index).
  virtual void BeginOptimizerSteps(const std::vector<std::pair<int, int>>& stepping) = 0;
  virtual void EndOptimizerSteps() = 0;
  // Waits for what the step launched; returns the step's seconds.
  virtual double EndStep() = 0;
};

// Wall-clock timing on the host.
class HostActionClock : public ActionClock {
 public:
  HostActionClock(const ProcessPlace& place, ClockReports reports) : place_(place), reports_(std::move(reports)) {}

  void StartStep(bool last_step) override;
  void BeginAction(int r, int index, const Action& a, const Schedule& sch, const StepEdges& edges) override;
  void EndAction() override;
  void ActionsDone() override {}
  void BeginOptimizerSteps(const std::vector<std::pair<int, int>>& stepping) override;
  void EndOptimizerSteps() override;
  double EndStep() override { return Since_s(); }

 protected:
  double Since_s() const;
  // Reports the optimizer steps' host interval (a device clock that timed them reports them itself).
  void ReportOptimizerSteps(double ended_s);

  const ProcessPlace& place_;
  ClockReports reports_;
  bool traced_ = false;  // this step's intervals are reported
  std::chrono::steady_clock::time_point t0_;
  // The action between BeginAction and EndAction.
  int rank_ = 0, index_ = 0;
  const Action* action_ = nullptr;
  double began_s_ = 0;
  std::vector<std::pair<int, int>> stepping_;
};

// The clock for `device`: the host's, or on CUDA the device's (green-context
// streams for ranks with an SM quota when `sm_quotas`; notes their creation).
std::unique_ptr<ActionClock> MakeActionClock(const ExecutionPlan& exec, const ProcessPlace& place,
                                             const torch::Device& device, bool sm_quotas, ClockReports reports);

}  // namespace loom::runtime
