#include "loom/runtime/fault_tolerance.h"

#include <fmt/format.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <system_error>

#include "loom/error.h"

namespace loom::runtime {

// A command is one line whose path, last, runs to its end: a path may hold
// spaces (`--checkpoint "/data/run 2"` once wrote into /data/run, issue 45's
// review), but not a line break.
std::string FormatCommand(const ControlCommand& c) {
  for (const std::string* p : {&c.path, &c.restore_from}) {
    if (p->find('\n') != std::string::npos || p->find('\r') != std::string::npos) {
      throw Error(fmt::format("a path with a line break cannot be sent to a worker: '{}'", *p));
    }
  }
  switch (c.kind) {
    case ControlCommand::Kind::kGo:
      return c.path.empty() ? fmt::format("go {}", c.step) : fmt::format("go {} {}", c.step, c.path);
    case ControlCommand::Kind::kGeneration:
      if (!c.restore) {
        return fmt::format("gen {} {} {} {} {} -1 {}", c.generation, c.step, c.rank, c.world, c.nodes, c.path);
      }
      return fmt::format("gen {} {} {} {} {} {} {}{}", c.generation, c.step, c.rank, c.world, c.nodes, c.path.size(),
                         c.path, c.restore_from.empty() ? "" : " " + c.restore_from);
    case ControlCommand::Kind::kStop:
      return fmt::format("stop {} {}", c.step, c.path);
    case ControlCommand::Kind::kExit:
      return "exit";
  }
  return "exit";
}

namespace {

// A command's fields, left to right, each after exactly one space (what
// FormatCommand writes). Each error names the line and the field, so a
// launcher and worker out of step say which number went wrong; `istream >>`
// left such a field at its old value and read on.
class CommandFields {
 public:
  explicit CommandFields(const std::string& line) : line_(line) {
    pos_ = std::min(line_.find(' '), line_.size());
    kind_ = line_.substr(0, pos_);
  }

  const std::string& kind() const { return kind_; }

  int Int(const char* field) {
    if (pos_ >= line_.size()) {
      throw Error(fmt::format("runtime: control command '{}' lacks its {}", line_, field));
    }
    const size_t begin = pos_ + 1;  // past the space
    const size_t end = std::min(line_.find(' ', begin), line_.size());
    int v = 0;
    const auto [ptr, ec] = std::from_chars(line_.data() + begin, line_.data() + end, v);
    if (begin == end || ec != std::errc() || ptr != line_.data() + end) {
      throw Error(fmt::format("runtime: control command '{}' has '{}' where its {} (an int) belongs", line_,
                              line_.substr(begin, end - begin), field));
    }
    pos_ = end;
    return v;
  }

  // The rest of the line after the fields read, without the one space before
  // it: the path, spaces included (a path may begin or end with one).
  std::string Path() const { return pos_ < line_.size() ? line_.substr(pos_ + 1) : std::string(); }
  std::string RequiredPath() const {
    std::string path = Path();
    if (path.empty()) throw Error(fmt::format("runtime: control command '{}' lacks its path", line_));
    return path;
  }

 private:
  const std::string& line_;
  std::string kind_;
  size_t pos_ = 0;  // where the fields not yet read start: at their space, or the line's end
};

}  // namespace

ControlCommand ParseCommand(const std::string& line) {
  CommandFields in(line);
  ControlCommand c;
  if (in.kind() == "go") {
    c.kind = ControlCommand::Kind::kGo;
    c.step = in.Int("step");
    c.path = in.Path();  // optional: the checkpoint to write before the step
  } else if (in.kind() == "gen") {
    c.kind = ControlCommand::Kind::kGeneration;
    c.generation = in.Int("generation");
    c.step = in.Int("step");
    c.rank = in.Int("rank");
    c.world = in.Int("world");
    c.nodes = in.Int("nodes");
    const int plan_bytes = in.Int("restore");
    const std::string rest = in.RequiredPath();
    if (plan_bytes < 0) {
      c.path = rest;
    } else {
      // The plan file's path, then the checkpoint folder's (if any) after one space.
      if (plan_bytes == 0 || static_cast<size_t>(plan_bytes) > rest.size() ||
          (static_cast<size_t>(plan_bytes) < rest.size() && rest[plan_bytes] != ' ')) {
        throw Error(
            fmt::format("runtime: control command '{}' has a plan path of {} bytes, which its paths do not "
                        "split at",
                        line, plan_bytes));
      }
      c.restore = true;
      c.path = rest.substr(0, plan_bytes);
      c.restore_from = static_cast<size_t>(plan_bytes) < rest.size() ? rest.substr(plan_bytes + 1) : "";
    }
  } else if (in.kind() == "stop") {
    c.kind = ControlCommand::Kind::kStop;
    c.step = in.Int("step");
    c.path = in.RequiredPath();
  } else if (in.kind() == "exit") {
    c.kind = ControlCommand::Kind::kExit;
    if (!in.Path().empty()) throw Error(fmt::format("runtime: control command '{}' has fields after 'exit'", line));
  } else {
    throw Error(fmt::format("runtime: unknown control command '{}'", line));
  }
  return c;
}

WorkerControl::WorkerControl(int control_fd, int report_fd, double heartbeat_s)
    : control_fd_(control_fd), report_fd_(report_fd), heartbeat_s_(heartbeat_s) {
  thread_ = std::thread([this] { Monitor(); });
}

WorkerControl::~WorkerControl() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

std::optional<ControlCommand> WorkerControl::Pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_;
}

ControlCommand WorkerControl::TakePending() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!pending_) throw Error("runtime: no control command is pending");
  ControlCommand c = *pending_;
  pending_.reset();
  abort = false;
  return c;
}

bool WorkerControl::WaitReleased(int step) const {
  while (released_.load() < step) {
    if (abort.load()) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(300));
  }
  return true;
}

std::string WorkerControl::CheckpointBefore(int step) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = checkpoints_.find(step);
  return it == checkpoints_.end() ? "" : it->second;
}

void WorkerControl::SetInterrupt(std::function<void()> interrupt) {
  std::lock_guard<std::mutex> lock(mu_);
  interrupt_ = std::move(interrupt);
  if (interrupt_ && abort.load()) {
    interrupt_();
    interrupt_ = nullptr;
  }
}

void WorkerControl::Monitor() {
  std::string buffer;
  auto next_beat = std::chrono::steady_clock::now();
  while (!stop_) {
    if (std::chrono::steady_clock::now() >= next_beat) {
      WriteLine(report_fd_, Encode(report::Heartbeat{}));
      next_beat += std::chrono::microseconds(static_cast<int64_t>(heartbeat_s_ * 1e6));
    }
    pollfd p{control_fd_, POLLIN, 0};
    if (poll(&p, 1, 20) <= 0) continue;
    char buf[1024];
    const ssize_t n = read(control_fd_, buf, sizeof(buf));
    if (n <= 0) {  // the launcher is gone: nothing more will come
      std::lock_guard<std::mutex> lock(mu_);
      pending_ = ControlCommand{ControlCommand::Kind::kExit};
      abort = true;
      if (interrupt_) interrupt_();
      interrupt_ = nullptr;
      return;
    }
    buffer.append(buf, static_cast<size_t>(n));
    size_t nl;
    while ((nl = buffer.find('\n')) != std::string::npos) {
      const std::string line = buffer.substr(0, nl);
      buffer.erase(0, nl + 1);
      ControlCommand c;
      try {
        c = ParseCommand(line);
      } catch (const Error& e) {
        // The launcher and this worker are out of step (a bug): say so before
        // exiting, so the run fails naming the command, not a silent exit.
        WriteLine(report_fd_, Encode(report::Failure{e.what()}));
        c.kind = ControlCommand::Kind::kExit;
      }
      if (c.kind == ControlCommand::Kind::kGo) {
        if (!c.path.empty()) {
          std::lock_guard<std::mutex> lock(mu_);
          checkpoints_[c.step] = c.path;
        }
        released_ = std::max(released_.load(), c.step);
        continue;
      }
      std::lock_guard<std::mutex> lock(mu_);
      // A new generation starts at c.step, which may be before what was
      // released (a recovery that restores a checkpoint rolls back): later
      // steps wait for their release again, and saves asked for after c.step
      // are the old generation's.
      if (c.kind == ControlCommand::Kind::kGeneration || c.kind == ControlCommand::Kind::kStop) {
        released_ = c.step;
        checkpoints_.erase(checkpoints_.upper_bound(c.step), checkpoints_.end());
      }
      pending_ = c;
      abort = true;
      if (interrupt_) interrupt_();
      interrupt_ = nullptr;
    }
  }
}

}  // namespace loom::runtime
