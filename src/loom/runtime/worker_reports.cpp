#include "loom/runtime/worker_reports.h"

#include <unistd.h>

namespace loom::runtime {

void WriteLine(int fd, const std::string& line) {
  const std::string text = line + "\n";
  size_t off = 0;
  while (off < text.size()) {
    const ssize_t n = write(fd, text.data() + off, text.size() - off);
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

void WorkerReports::Step(const WorkerMessage& message) {
  if (hold_steps_) {
    held_.push_back(message);
  } else {
    Now(message);
  }
}

}  // namespace loom::runtime
