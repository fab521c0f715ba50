#include "loom/runtime/launcher_signals.h"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace loom::runtime {

namespace {

constexpr int kCaught[3] = {SIGINT, SIGTERM, SIGHUP};

// Written only by OnSignal, read by LauncherSignals::Received (see the header).
volatile sig_atomic_t g_received = 0;

void OnSignal(int signal) {
  if (g_received == 0) g_received = signal;
}

}  // namespace

LauncherSignals::LauncherSignals(bool restart_calls) {
  g_received = 0;
  struct sigaction action {};
  action.sa_handler = OnSignal;
  action.sa_flags = restart_calls ? SA_RESTART : 0;
  sigemptyset(&action.sa_mask);
  for (int i = 0; i < 3; ++i) sigaction(kCaught[i], &action, &previous_[i]);
}

LauncherSignals::~LauncherSignals() {
  for (int i = 0; i < 3; ++i) sigaction(kCaught[i], &previous_[i], nullptr);
}

int LauncherSignals::Received() const { return g_received; }

void RestoreDefaultSignals() {
  for (int s : kCaught) signal(s, SIG_DFL);
}

void StopProcesses(std::vector<pid_t>& pids, int signal, double grace_s) {
  for (pid_t p : pids) {
    if (p > 0) kill(p, signal);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
  for (;;) {
    bool left = false;
    for (pid_t& p : pids) {
      if (p <= 0) continue;
      int status = 0;
      const pid_t r = waitpid(p, &status, WNOHANG);
      if (r == p || (r < 0 && errno == ECHILD)) {
        p = -1;
      } else {
        left = true;
      }
    }
    if (!left) return;
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (pid_t& p : pids) {
    if (p <= 0) continue;
    kill(p, SIGKILL);
    int status = 0;
    waitpid(p, &status, 0);
    p = -1;
  }
}

}  // namespace loom::runtime
