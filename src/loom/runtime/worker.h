// One worker process of RunLocally (runtime/run.h): rank `rank` of `world`
// walks its action lists for every step and reports through `report_fd`
// (runtime/run.cpp reads it). No torch in this header.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "loom/plan/execution_plan.h"
#include "loom/runtime/run.h"
#include "loom/runtime/runnable_plan.h"

namespace loom::runtime {

struct WorkerSpec {
  const Model* model = nullptr;
  const Cluster* cluster = nullptr;
  const Workload* workload = nullptr;
  const Plan* plan = nullptr;
  // Per step, the strategy's schedule of that step's batch (absent: the plan's own compile).
  const std::vector<std::optional<IterationSchedule>>* schedules = nullptr;
  RunOptions options;
  int rank = 0;
  int world = 1;
  int port = 0;
  // A fault-tolerant run (runtime/fault_tolerance.h): the launcher's commands
  // arrive on control_fd; `birth` names this worker for fault injection
  // across generations; it starts in `generation` at `first_step`, from
  // options.resume_checkpoint (or the initial state) where `restores`, else
  // (a later generation's fresh worker) from what the survivors hand over.
  int control_fd = -1;
  int birth = 0;
  int generation = 0;
  int first_step = 0;
  bool restores = true;
};

// Runs the worker and reports to `report_fd` (runtime/worker_message.h's
// messages, through runtime/worker_reports.h). Returns the process exit code.
int RunWorker(const WorkerSpec& spec, int report_fd);

}  // namespace loom::runtime
