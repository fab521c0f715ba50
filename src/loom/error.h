// loom::Error is the one exception type for bad user input: a malformed or
// inconsistent spec, an unknown name, an impossible request. Its message names
// where the problem is (file, line, field) and what would be valid. The CLI
// prints it and exits 2. Internal invariant breaks are not Errors: they are bugs.
#pragma once

#include <stdexcept>
#include <string>

namespace loom {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace loom
