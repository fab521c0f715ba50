// Reading what a user names as input: the whole of a small file, or a file
// line by line, never more than a stated size (issue 45: `--model /dev/zero`
// was read until memory ran out, and a failed allocation left the stream
// quietly empty, so `replay --failures /dev/zero` reported no failures and
// exited 0). Pipes and devices are read as files are (`--workload <(...)`);
// a folder, an unreadable file or one past the size is a loom::Error naming
// the path, what kind of file was expected and the limit.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

namespace loom {

// Limits, each far above what a real input of the kind holds.
inline constexpr int64_t kMaxSpecBytes = int64_t{64} << 20;   // model, cluster, workload, profile YAML; config.json
inline constexpr int64_t kMaxPlanBytes = int64_t{1} << 30;    // plan JSON with every batch's schedule
inline constexpr int64_t kMaxLineBytes = int64_t{256} << 20;  // one JSONL sample or trace line

// The whole of `path`, whose kind `what` names ("model YAML", "plan JSON").
// Throws loom::Error for a folder, a file that cannot be opened or read, or
// one past `max_bytes`.
std::string ReadInputFile(const std::string& path, const std::string& what, int64_t max_bytes);

// `path` line by line (without the '\n'; a last line without one counts),
// each at most `max_line_bytes`. Not thread-safe.
class InputLines {
 public:
  // Throws loom::Error for a folder or a file that cannot be opened.
  InputLines(const std::string& path, const std::string& what, int64_t max_line_bytes = kMaxLineBytes);

  // The next line into `line`; false at the end. Throws loom::Error naming
  // the line past the limit or a read error.
  bool Next(std::string& line);

  // The number of the line Next returned last (1-based), and its first byte's offset in the file.
  int line_number() const { return line_number_; }
  int64_t line_offset() const { return line_offset_; }

 private:
  std::string path_, what_;
  int64_t max_line_bytes_;
  std::ifstream in_;
  int line_number_ = 0;
  int64_t line_offset_ = 0, read_bytes_ = 0;
};

}  // namespace loom
