#include "loom/runtime/worker_reports.h"

#include <unistd.h>

namespace loom::runtime {

void WriteReportLine(int fd, const std::string& line) {
  const std::string text = line + "\n";
  ssize_t off = 0;
  while (off < static_cast<ssize_t>(text.size())) {
    const ssize_t n = write(fd, text.data() + off, text.size() - off);
    if (n <= 0) return;
    off += n;
  }
}

void WorkerReports::Step(const std::string& line) {
  if (hold_steps_) {
    held_.push_back(line);
  } else {
    WriteReportLine(fd_, line);
  }
}

}  // namespace loom::runtime
