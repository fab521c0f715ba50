#include "loom/runtime/fault_tolerance.h"

#include <fmt/format.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <sstream>

#include "loom/error.h"

namespace loom::runtime {

// A command is one line whose path, last, runs to its end: a path may hold
// spaces (`--checkpoint "/data/run 2"` once wrote into /data/run, issue 45's
// review), but not a line break.
std::string FormatCommand(const ControlCommand& c) {
  if (c.path.find('\n') != std::string::npos || c.path.find('\r') != std::string::npos) {
    throw Error(fmt::format("a path with a line break cannot be sent to a worker: '{}'", c.path));
  }
  switch (c.kind) {
    case ControlCommand::Kind::kGo:
      return c.path.empty() ? fmt::format("go {}", c.step) : fmt::format("go {} {}", c.step, c.path);
    case ControlCommand::Kind::kGeneration:
      return fmt::format("gen {} {} {} {} {} {}", c.generation, c.step, c.rank, c.world, c.nodes, c.path);
    case ControlCommand::Kind::kStop:
      return fmt::format("stop {} {}", c.step, c.path);
    case ControlCommand::Kind::kExit:
      return "exit";
  }
  return "exit";
}

namespace {

// The rest of the line after the fields read: the path, spaces included.
std::string RestOfLine(std::istringstream& in) {
  std::string rest;
  if (in.peek() == ' ') in.get();
  std::getline(in, rest);
  return rest;
}

}  // namespace

ControlCommand ParseCommand(const std::string& line) {
  std::istringstream in(line);
  std::string kind;
  in >> kind;
  ControlCommand c;
  if (kind == "go") {
    c.kind = ControlCommand::Kind::kGo;
    in >> c.step;
    if (in.fail()) throw Error(fmt::format("runtime: malformed control command '{}'", line));
    c.path = RestOfLine(in);  // optional
    return c;
  } else if (kind == "gen") {
    c.kind = ControlCommand::Kind::kGeneration;
    in >> c.generation >> c.step >> c.rank >> c.world >> c.nodes;
    if (!in.fail()) c.path = RestOfLine(in);
    if (c.path.empty()) in.setstate(std::ios::failbit);
  } else if (kind == "stop") {
    c.kind = ControlCommand::Kind::kStop;
    in >> c.step;
    if (!in.fail()) c.path = RestOfLine(in);
    if (c.path.empty()) in.setstate(std::ios::failbit);
  } else if (kind == "exit") {
    c.kind = ControlCommand::Kind::kExit;
    return c;
  } else {
    throw Error(fmt::format("runtime: unknown control command '{}'", line));
  }
  if (in.fail()) throw Error(fmt::format("runtime: malformed control command '{}'", line));
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
      } catch (const Error&) {
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
      pending_ = c;
      abort = true;
      if (interrupt_) interrupt_();
      interrupt_ = nullptr;
    }
  }
}

}  // namespace loom::runtime
