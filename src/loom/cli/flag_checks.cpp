#include "loom/cli/flag_checks.h"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <exception>
#include <limits>
#include <stdexcept>
#include <string>

#include "loom/error.h"

namespace loom::cli {

const CLI::Validator kFileName(
    [](std::string& v) { return v.empty() ? std::string("a file name is required, got an empty one") : std::string(); },
    "FILE");

const CLI::Validator kOutputFile(
    [](std::string& v) { return v.empty() ? std::string("a file name is required, got an empty one") : std::string(); },
    "FILE", kOutputValidatorName);

const CLI::Validator kOutputFolder(
    [](std::string& v) {
      return v.empty() ? std::string("a folder name is required, got an empty one") : std::string();
    },
    "DIR", kOutputFolderValidatorName);

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
    [](std::string& v) {
      if (!v.empty() && v[0] == '-') return "must be >= 0, got " + v;
      try {  // a number must be finite: inf, nan and 1e400 are not sizes or times
        const double x = std::stod(v);
        if (!std::isfinite(x)) return "must be a finite number >= 0, got " + v;
      } catch (const std::out_of_range&) {
        return "must be a finite number >= 0, got " + v;
      } catch (const std::exception&) {  // not a number: the option's own conversion says so
      }
      return std::string();
    },
    "UINT");

int64_t ParseIntIn(const std::string& text, const std::string& what, int64_t lo, int64_t hi) {
  const std::string range = fmt::format("an integer in {}..{}", lo, hi);
  int64_t v = 0;
  try {
    size_t used = 0;
    v = std::stoll(text, &used);
    if (used != text.size() || text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) {
      throw std::invalid_argument(text);
    }
  } catch (const std::exception&) {
    throw loom::Error(fmt::format("{}: '{}' is not {}", what, text, range));
  }
  if (v < lo || v > hi) throw loom::Error(fmt::format("{}: {} is out of range; valid: {}", what, text, range));
  return v;
}

double ParseRealIn(const std::string& text, const std::string& what, double lo_exclusive, double hi) {
  const std::string range = fmt::format("a number > {} and <= {}", lo_exclusive, hi);
  double v = 0;
  try {
    size_t used = 0;
    v = std::stod(text, &used);
    if (used != text.size()) throw std::invalid_argument(text);
  } catch (const std::exception&) {
    throw loom::Error(fmt::format("{}: '{}' is not {}", what, text, range));
  }
  if (!(v > lo_exclusive && v <= hi)) throw loom::Error(fmt::format("{}: {} is out of range; valid: {}", what, text, range));
  return v;
}

CLI::Validator IntIn(int64_t lo, int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& v) {
        try {
          ParseIntIn(v, "value", lo, hi);
          return std::string();
        } catch (const loom::Error& e) {
          return std::string(e.what()).substr(7);  // past "value: "
        }
      },
      "INT");
}

// After IntIn: initialised in this file's order.
const CLI::Validator kPositiveInt = IntIn(1, std::numeric_limits<int>::max());
const CLI::Validator kNotNegativeInt = IntIn(0, std::numeric_limits<int>::max());

CLI::Validator RealIn(double lo_exclusive, double hi) {
  return CLI::Validator(
      [lo_exclusive, hi](std::string& v) {
        try {
          ParseRealIn(v, "value", lo_exclusive, hi);
          return std::string();
        } catch (const loom::Error& e) {
          return std::string(e.what()).substr(7);
        }
      },
      "NUMBER");
}

CLI::Validator NotNegativeRealAtMost(double hi) {
  return CLI::Validator(
      [hi](std::string& v) {
        const std::string range = fmt::format("valid: a number from 0 to {:g}", hi);
        try {
          size_t used = 0;
          const double x = std::stod(v, &used);
          if (used != v.size()) return fmt::format("'{}' is not a number; {}", v, range);
          if (!(x >= 0 && x <= hi)) return fmt::format("{} is out of range; {}", v, range);
        } catch (const std::out_of_range&) {  // past a double (1e400)
          return fmt::format("{} is out of range; {}", v, range);
        } catch (const std::exception&) {
          return fmt::format("'{}' is not a number; {}", v, range);
        }
        return std::string();
      },
      "NUMBER");
}

}  // namespace loom::cli
