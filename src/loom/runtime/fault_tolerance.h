// The protocol of a fault-tolerant run (`loom run --fault-tolerance F`,
// runtime/run.h): the launcher and its workers talk over a pair of pipes per
// worker, independent of the communication library, so a dead or hung peer
// is noticed in bounded time and never leaves the others in a c10d wait.
//
//   worker -> launcher (the report pipe, runtime/worker.h's lines, plus):
//     "hb"                  every heartbeat period, from a thread of its own;
//     "done S"              step S finished here (optimizer step included);
//     "ready G SECONDS BYTES" generation G is set up: groups built, missing
//                           layers received (BYTES), SECONDS since its command;
//     "dying STEP T"        fault injection: about to kill itself (T: steady clock).
//   launcher -> worker (the control pipe):
//     "go S [DIR]"          every worker finished step S - 1: start step S
//                           (S = steps: finish); losses of S - 1 are reported then;
//                           with DIR, first write the layers it holds to
//                           checkpoint DIR and report "saved S" (--checkpoint-every);
//     "gen G FIRST RANK WORLD NODES R PATH[ CKPT]"  reconfigure: generation G
//                           runs the plan in file PATH on NODES nodes, this
//                           worker as process RANK of WORLD, from step FIRST.
//                           R = -1: the survivors hand their whole layers over
//                           (the copy); else every worker restores checkpoint
//                           folder CKPT (none: the run's initial state), R
//                           being PATH's length (both paths may hold spaces);
//     "stop FIRST DIR"      the run cannot go on: write the layers this worker
//                           holds as of step FIRST to checkpoint DIR and exit.
//
// Steps commit in lockstep: no worker starts step S + 1 before every worker
// finished S, so a worker's state is either the one after the last committed
// step (it finished it) or the snapshot it took when its step began: the
// interrupted step is replayed from there, once. Torch-free.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "loom/runtime/worker_reports.h"  // WriteLine

namespace loom::runtime {

struct ControlCommand {
  enum class Kind { kGo, kGeneration, kStop, kExit };
  Kind kind = Kind::kGo;
  int step = 0;        // go: the step released; gen/stop: the first step not yet committed
  int generation = 0;  // gen
  int rank = 0, world = 0, nodes = 0;
  std::string path;  // gen: the plan file; stop, go: a checkpoint directory (go: optional)
  // gen: whether every worker restores `restore_from` (a checkpoint folder;
  // "": the initial state) instead of the survivors' copy.
  bool restore = false;
  std::string restore_from;
};

std::string FormatCommand(const ControlCommand& c);
// Throws loom::Error for a line that is not a command.
ControlCommand ParseCommand(const std::string& line);

// The worker's side: a thread that reads the control pipe and writes
// heartbeats to the report pipe. `abort` is set once a gen or stop command (or
// the launcher's end: kExit) arrives; the worker's waits poll it
// (c10d_calls.h's Await). Thread safety: every member may be called from the
// worker's thread while the monitor runs.
class WorkerControl {
 public:
  WorkerControl(int control_fd, int report_fd, double heartbeat_s);
  ~WorkerControl();
  WorkerControl(const WorkerControl&) = delete;
  WorkerControl& operator=(const WorkerControl&) = delete;

  std::atomic<bool> abort{false};
  // The highest step a "go" released (-1: none yet).
  int released() const { return released_.load(); }
  // The command that set `abort`, once it has; clears `abort` when taken.
  std::optional<ControlCommand> Pending() const;
  ControlCommand TakePending();
  // Waits until step `step` is released (true) or `abort` is set (false).
  bool WaitReleased(int step) const;
  // The checkpoint directory the "go" of `step` asked for ("" if none).
  std::string CheckpointBefore(int step) const;
  // While set, `interrupt` runs (on the monitor thread, once) when `abort`
  // is set, or at once if it already is: it wakes a blocking wait.
  void SetInterrupt(std::function<void()> interrupt);

 private:
  void Monitor();
  int control_fd_, report_fd_;
  double heartbeat_s_;
  std::atomic<int> released_{-1};
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::optional<ControlCommand> pending_;   // guarded by mu_
  std::function<void()> interrupt_;         // guarded by mu_
  std::map<int, std::string> checkpoints_;  // guarded by mu_: go's step -> directory
  std::thread thread_;
};

}  // namespace loom::runtime
