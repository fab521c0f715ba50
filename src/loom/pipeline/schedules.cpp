#include "loom/pipeline/schedules.h"

#include <fmt/format.h>

#include "loom/error.h"

namespace loom {

Schedule EmptySchedule(const char* name, int ranks, int microbatches, int stages) {
  if (ranks < 1 || microbatches < 1) {
    throw Error(fmt::format("{} schedule: ranks ({}) and microbatches ({}) must be >= 1", name, ranks,
                            microbatches));
  }
  Schedule s;
  s.name = name;
  s.num_ranks = ranks;
  s.num_microbatches = microbatches;
  s.stage_rank.resize(stages);
  for (int v = 0; v < stages; ++v) {
    s.stage_rank[v] = v % ranks;
  }
  s.ranks.resize(ranks);
  return s;
}

Schedule MakeSchedule(const std::string& name, int ranks, int microbatches, int chunks, bool p2p) {
  if (name != "interleaved" && chunks != 1) {
    throw Error(fmt::format("--vpp {} needs the interleaved schedule, not {}", chunks, name));
  }
  if (name == "gpipe") return MakeGPipe(ranks, microbatches, p2p);
  if (name == "1f1b") return MakeOneFOneB(ranks, microbatches, p2p);
  if (name == "interleaved") return MakeInterleaved(ranks, microbatches, chunks, p2p);
  if (name == "zb-h1") return MakeZbH1(ranks, microbatches, p2p);
  throw Error(fmt::format("unknown schedule '{}'; valid: gpipe, 1f1b, interleaved, zb-h1", name));
}

}  // namespace loom
