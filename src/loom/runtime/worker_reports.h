// What a worker process tells its launcher (runtime/worker_message.h), on its
// report pipe. A fault-tolerant run's worker holds a step's messages until
// the step commits, so a replayed step is never reported twice. Not thread-safe.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "loom/runtime/worker_message.h"

namespace loom::runtime {

// Writes `line` and a line break to `fd`, whole (a write cut short is
// retried; a closed pipe drops the line: its reader is gone). The one writer
// of the runtime's pipes: reports, control commands, the store's answer.
void WriteLine(int fd, const std::string& line);

class WorkerReports {
 public:
  // `hold_steps`: a step's messages wait for TakeStep.
  WorkerReports(int fd, bool hold_steps) : fd_(fd), hold_steps_(hold_steps) {}

  // At once.
  void Now(const WorkerMessage& message) const { WriteLine(fd_, Encode(message)); }
  // As part of the current step.
  void Step(const WorkerMessage& message);
  // The current step's held messages (empty unless hold_steps).
  std::vector<WorkerMessage> TakeStep() { return std::exchange(held_, {}); }

 private:
  int fd_;
  bool hold_steps_;
  std::vector<WorkerMessage> held_;
};

}  // namespace loom::runtime
