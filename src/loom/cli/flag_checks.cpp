#include "loom/cli/flag_checks.h"

#include <cmath>
#include <exception>
#include <string>

namespace loom::cli {

const CLI::Validator kFileName(
    [](std::string& v) { return v.empty() ? std::string("a file name is required, got an empty one") : std::string(); },
    "FILE");

const CLI::Validator kPositive(
    [](std::string& v) {
      try {
        const double x = std::stod(v);
        return x > 0 && std::isfinite(x) ? std::string() : "must be > 0, got " + v;
      } catch (const std::exception&) {
        return "must be a number > 0, got '" + v + "'";
      }
    },
    "POSITIVE");

const CLI::Validator kNotNegative(
    [](std::string& v) { return !v.empty() && v[0] == '-' ? "must be >= 0, got " + v : std::string(); }, "UINT");

}  // namespace loom::cli
