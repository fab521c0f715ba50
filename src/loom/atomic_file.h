// Writing an output file so that a reader sees the old file or the new one,
// never a half-written one (rule 4: a full disk or a crash mid-write must not
// lose what was there): the bytes go to a temporary file beside the target,
// are flushed to disk (fsync), and the temporary file is renamed over the
// target in one step.
#pragma once

#include <string>
#include <string_view>

namespace loom {

// Writes `bytes` to `path` atomically. A symbolic link's target is replaced
// (the link stays); a device, pipe or socket (/dev/stdout) is written in place,
// as a stream cannot be replaced. Throws loom::Error naming `path` and the
// system's reason when the file cannot be written or renamed, or `path` is a
// folder; the temporary file is removed and `path` is left as it was.
void WriteFileAtomically(const std::string& path, std::string_view bytes);

// The name of the temporary file WriteFileAtomically uses for `path` (same
// folder, so that the rename never crosses file systems).
std::string TemporaryPathFor(const std::string& path);

}  // namespace loom
