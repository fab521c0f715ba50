// Files read from inside a folder (a model's config.json and weights, a
// checkpoint's manifest and parts, a sample's pixel file) must be regular
// files: a pipe there would block the reader in open() forever, and a folder,
// a dangling link or a link loop is a broken input, never "no file".
// (Top-level inputs may be pipes on purpose: path_kind.h IsInputFile.)
#pragma once

#include <string>

namespace loom {

// Why `path` is not a regular file to read: "" when it is one (through any
// links), else "no such file", "a dangling symbolic link", "a symbolic link
// loop", "a folder", "a pipe (FIFO)" or "a socket or device".
std::string NotARegularFile(const std::string& path);

}  // namespace loom
