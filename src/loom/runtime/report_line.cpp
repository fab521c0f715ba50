#include "loom/runtime/report_line.h"

#include <fmt/format.h>

#include <cerrno>
#include <climits>
#include <cstdlib>

#include "loom/error.h"

namespace loom::runtime {

ReportLine::ReportLine(std::string line) : line_(std::move(line)) { kind_ = Field(nullptr); }

std::string ReportLine::Field(const char* what) {
  while (pos_ < line_.size() && line_[pos_] == ' ') ++pos_;
  const size_t end = std::min(line_.find(' ', pos_), line_.size());
  std::string out = line_.substr(pos_, end - pos_);
  pos_ = end;
  if (out.empty() && what != nullptr) {
    throw Error(fmt::format("runtime: a worker's report '{}' lacks its {}", line_, what));
  }
  return out;
}

double ReportLine::Number() {
  const std::string f = Field("number");
  char* end = nullptr;
  const double v = std::strtod(f.c_str(), &end);
  if (end != f.c_str() + f.size()) {
    throw Error(fmt::format("runtime: a worker's report '{}' has '{}' where a number belongs", line_, f));
  }
  return v;
}

int64_t ReportLine::Integer() {
  const std::string f = Field("integer");
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(f.c_str(), &end, 10);
  if (end != f.c_str() + f.size() || errno == ERANGE) {
    throw Error(fmt::format("runtime: a worker's report '{}' has '{}' where an integer belongs", line_, f));
  }
  return static_cast<int64_t>(v);
}

std::string ReportLine::Rest() const {
  size_t p = pos_;
  if (p < line_.size() && line_[p] == ' ') ++p;
  return line_.substr(p);
}

}  // namespace loom::runtime
