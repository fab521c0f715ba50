// loom::Error is the one exception type for bad user input: a malformed or
// inconsistent spec, an unknown name, an impossible request. Its message names
// where the problem is (file, line, field) and what would be valid. The CLI
// prints it and exits 2. Internal invariant breaks are not Errors: they are bugs.
#pragma once

#include <signal.h>
#include <string.h>

#include <stdexcept>
#include <string>

namespace loom {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(Visible(message)) {}

 private:
  // A message quotes input, and input may hold bytes a terminal acts on or a
  // C string stops at (a NUL in a CSV cell cut the message short): each
  // control character but a line break or tab is written \xNN.
  static std::string Visible(const std::string& message);
};

// A run stopped because the launcher received SIGINT, SIGTERM or SIGHUP
// (runtime/launcher_signals.h): not bad input, so not an Error. The CLI exits
// 128 + signal(), as a shell reports a process that signal ended.
class Interrupted : public std::runtime_error {
 public:
  // `after`: what the run left behind, said after the signal ("" : its workers were stopped too).
  explicit Interrupted(int signal, const std::string& after = "")
      : std::runtime_error(std::string("stopped by ") + sigabbrev(signal) + ": " +
                           (after.empty() ? "its workers were stopped too" : after)),
        signal_(signal) {}
  int signal() const { return signal_; }

 private:
  static std::string sigabbrev(int signal) {
    const char* d = strsignal(signal);
    return std::string("signal ") + std::to_string(signal) + (d ? std::string(" (") + d + ")" : "");
  }
  int signal_;
};

}  // namespace loom
