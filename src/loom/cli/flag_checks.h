// Checks of flag values that CLI11's own checks let through: an empty file
// name, NaN and infinities and zero where a positive number is needed
// (CLI11's own check says "Value 0 not in range 0.000000 to 1.797693e+308"),
// a negative number for an unsigned option (it would wrap).
#pragma once

#include <CLI/CLI.hpp>

namespace loom::cli {

extern const CLI::Validator kFileName;     // a non-empty file name
extern const CLI::Validator kPositive;     // a finite number > 0
extern const CLI::Validator kNotNegative;  // no leading '-'

}  // namespace loom::cli
