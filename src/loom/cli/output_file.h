// Writing a file a flag names (--json, --report, --svg, ...).
#pragma once

#include <string>

namespace loom::cli {

// Writes `text` to `path`. Throws loom::Error naming `flag` and `path` when
// the file cannot be opened or written in full (a full disk shows only when
// the buffer is flushed, so the file is closed before the check).
void WriteText(const std::string& path, const std::string& text, const char* flag);

}  // namespace loom::cli
