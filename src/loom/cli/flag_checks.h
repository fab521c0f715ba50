// Checks of flag values that CLI11's own checks let through: an empty file
// name, NaN and infinities and zero where a positive number is needed
// (CLI11's own check says "Value 0 not in range 0.000000 to 1.797693e+308"),
// a negative number for an unsigned option (it would wrap).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

namespace loom::cli {

extern const CLI::Validator kFileName;     // a non-empty file name
// A non-empty file name the command writes: Dispatch refuses it where it is
// also one of the command's inputs or another output (CheckOutputs).
extern const CLI::Validator kOutputFile;
inline constexpr const char* kOutputValidatorName = "output";
// The same for a folder the command writes into (`loom run --save DIR`).
extern const CLI::Validator kOutputFolder;
inline constexpr const char* kOutputFolderValidatorName = "output-folder";
extern const CLI::Validator kPositive;     // a finite number > 0
extern const CLI::Validator kNotNegative;  // no leading '-'; a number must be finite

// The one checked number parser (issue 45: a port past 65535 was wrapped, a
// timeout of 1e300 overflowed inside Gloo): the whole of `text` as an
// integer, or a finite real, in [lo, hi]; otherwise loom::Error naming
// `what`, the value and the range.
int64_t ParseIntIn(const std::string& text, const std::string& what, int64_t lo, int64_t hi);
double ParseRealIn(const std::string& text, const std::string& what, double lo_exclusive, double hi);
// The same as flag checks (the message names the range).
CLI::Validator IntIn(int64_t lo, int64_t hi);
CLI::Validator RealIn(double lo_exclusive, double hi);
// A finite number from 0 to `hi` (-0 is 0).
CLI::Validator NotNegativeRealAtMost(double hi);
// An `int` flag's values, checked before CLI11 converts them (its "Could not
// convert: --steps = 99999999999" names neither the range nor the reason).
extern const CLI::Validator kPositiveInt;     // 1..INT_MAX
extern const CLI::Validator kNotNegativeInt;  // 0..INT_MAX

}  // namespace loom::cli
