// The launcher passes on what a scheduler or a terminal sends it (issue 45).
// SIGINT, SIGTERM and SIGHUP sent to `loom run` alone (what Slurm, systemd or
// a supervisor does) reach its workers as the same signal; workers that have
// not ended after a grace period are killed; the run then fails with
// Interrupted, which the CLI turns into exit 128 + the signal, as a shell
// reports a process the signal ended. SIGKILL cannot be caught: for it the
// workers' PR_SET_PDEATHSIG (child_process.h) ends them.
//
// A handler can only set a flag, so the one piece of process-wide state here
// is that flag, written by the handler and read by the launcher's poll loops
// (run.cpp, generation_controller.cpp), which wake within their poll period.
// Torch-free.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <vector>

namespace loom::runtime {

// While alive, SIGINT, SIGTERM and SIGHUP set a flag instead of ending the
// process; the previous handlers come back on destruction. Not thread-safe:
// one per process, on the thread that waits for the workers.
// A worker of a run that saves checkpoints (`--checkpoint-dir`) holds one
// too, with `restart_calls`: a signal then asks it to stop after the step it
// is in, which every process does together with a checkpoint (the step's norm
// all-reduce carries the request: runtime/optimizer_steps.h), and system calls
// it interrupts are restarted (SA_RESTART), so a collective in flight goes on.
class LauncherSignals {
 public:
  explicit LauncherSignals(bool restart_calls = false);
  ~LauncherSignals();
  LauncherSignals(const LauncherSignals&) = delete;
  LauncherSignals& operator=(const LauncherSignals&) = delete;

  // The first of those signals received since construction, 0 if none.
  int Received() const;

 private:
  struct sigaction previous_[3] = {};
};

// In a process just forked from the launcher: the default action for the
// signals LauncherSignals catches, so that a forwarded SIGTERM ends it.
void RestoreDefaultSignals();

// Sends `signal` to each of `pids` (those not yet reaped), waits up to
// `grace_s` for them to exit, kills the rest with SIGKILL and reaps them all.
// Entries reaped are set to -1.
void StopProcesses(std::vector<pid_t>& pids, int signal, double grace_s);

// How long workers get to end after a forwarded signal before SIGKILL.
inline constexpr double kSignalGrace_s = 10;

}  // namespace loom::runtime
