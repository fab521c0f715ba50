#include "loom/data/data_identity.h"

#include <fmt/format.h>

#include <cstdint>
#include <fstream>
#include <vector>

#include "loom/error.h"

namespace loom {

namespace {

// FNV-1a 64 (Fowler, Noll, Vo): one pass, no dependency; it tells an edited
// file from the original, which is all a resume check needs (not a defence
// against a file made to collide).
std::string JsonlIdentity(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot be read (the samples of the run)", path));
  uint64_t hash = 14695981039346656037ull;
  int64_t bytes = 0;
  std::vector<char> buffer(1 << 20);  // read a MiB at a time
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const std::streamsize got = in.gcount();
    for (std::streamsize i = 0; i < got; ++i) {
      hash ^= static_cast<unsigned char>(buffer[i]);
      hash *= 1099511628211ull;
    }
    bytes += got;
  }
  if (in.bad()) throw Error(fmt::format("{}: a read error after {} bytes (the samples of the run)", path, bytes));
  return fmt::format("jsonl: bytes {}, fnv1a64 {:#018x}", bytes, hash);
}

}  // namespace

std::string DataStreamIdentity(const Workload& workload) {
  const SourceSpec& s = workload.source;
  if (s.kind == "jsonl") return JsonlIdentity(s.path);
  // Every parameter: a kind's unread ones keep its defaults (spec/workload.cpp refuses them in files).
  return fmt::format(
      "{}: seq_len {}, pack_tokens {}, image_tokens {}, image_px {}, video_px {}, fps {}, max_video_s {}, "
      "max_clips {}",
      s.kind, s.seq_len, s.pack_tokens, s.image_tokens, s.image_px, s.video_px, s.fps, s.max_video_s, s.max_clips);
}

}  // namespace loom
