// One line a worker reports to its launcher ("loss 3 -nan", runtime/worker_message.h's
// protocol), read field by field: Decode (worker_message.cpp) reads every
// line both launchers receive through this.
//
// Why not `istream >> double`: it cannot read "nan" or "inf" (what fmt writes
// for a diverged loss) and leaves the value it had, 0, so a run whose loss was
// NaN reported a loss of 0 and exited 0 (issue 45). strtod reads what fmt
// writes, and a field that is missing or not a number is an error naming the
// line, never a silent 0. Torch-free.
#pragma once

#include <cstdint>
#include <string>

namespace loom::runtime {

class ReportLine {
 public:
  explicit ReportLine(std::string line);

  // The first word ("loss", "time", ...); empty for an empty line.
  const std::string& kind() const { return kind_; }

  // The next field as a double (nan, -nan and inf included) or an integer;
  // throws loom::Error naming the line when it is missing or not one.
  double Number();
  int64_t Integer();
  int Int() { return static_cast<int>(Integer()); }
  // What is left of the line after the fields read so far, without its leading space.
  std::string Rest() const;

 private:
  std::string Field(const char* what);

  std::string line_, kind_;
  size_t pos_ = 0;
};

}  // namespace loom::runtime
