// What a worker process tells its launcher: text lines on its report pipe
// (runtime/worker.h lists them; runtime/report_line.h reads them back). A
// fault-tolerant run's worker holds a step's lines until the step commits,
// so a replayed step is never reported twice. Not thread-safe.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace loom::runtime {

// Writes `line` and a line break to `fd`, whole (a write cut short is
// retried; a closed pipe drops the line: the launcher is gone).
void WriteReportLine(int fd, const std::string& line);

class WorkerReports {
 public:
  // `hold_steps`: a step's lines wait for TakeStep.
  WorkerReports(int fd, bool hold_steps) : fd_(fd), hold_steps_(hold_steps) {}

  // At once.
  void Now(const std::string& line) const { WriteReportLine(fd_, line); }
  // As part of the current step.
  void Step(const std::string& line);
  // The current step's held lines (empty unless hold_steps).
  std::vector<std::string> TakeStep() { return std::exchange(held_, {}); }

 private:
  int fd_;
  bool hold_steps_;
  std::vector<std::string> held_;
};

}  // namespace loom::runtime
