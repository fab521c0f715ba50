#include "loom/pipeline/schedules.h"

#include <fmt/format.h>

#include "loom/error.h"

namespace loom {

Schedule EmptySchedule(const char* name, int ranks, int microbatches, int stages) {
  if (ranks < 1 || microbatches < 1) {
    throw Error(fmt::format("{} schedule: ranks ({}) and microbatches ({}) must be >= 1", name, ranks, microbatches));
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

std::string ScheduleKindName(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kGpipe:
      return "gpipe";
    case ScheduleKind::kOneFOneB:
      return "1f1b";
    case ScheduleKind::kInterleaved:
      return "interleaved";
    case ScheduleKind::kZbH1:
      return "zb-h1";
    case ScheduleKind::kCustom:
      return "custom";
  }
  return "?";
}

ScheduleKind ParseScheduleKind(const std::string& name, const std::string& field) {
  for (ScheduleKind k : {ScheduleKind::kGpipe, ScheduleKind::kOneFOneB, ScheduleKind::kInterleaved, ScheduleKind::kZbH1,
                         ScheduleKind::kCustom}) {
    if (name == ScheduleKindName(k)) return k;
  }
  throw Error(fmt::format("{}: unknown schedule '{}'; valid: gpipe, 1f1b, interleaved, zb-h1, custom", field, name));
}

Schedule MakeSchedule(ScheduleKind kind, int ranks, int microbatches, int chunks, bool p2p) {
  if (kind != ScheduleKind::kInterleaved && chunks != 1) {
    throw Error(fmt::format("--vpp {} needs the interleaved schedule, not {}", chunks, ScheduleKindName(kind)));
  }
  switch (kind) {
    case ScheduleKind::kGpipe:
      return MakeGPipe(ranks, microbatches, p2p);
    case ScheduleKind::kOneFOneB:
      return MakeOneFOneB(ranks, microbatches, p2p);
    case ScheduleKind::kInterleaved:
      return MakeInterleaved(ranks, microbatches, chunks, p2p);
    case ScheduleKind::kZbH1:
      return MakeZbH1(ranks, microbatches, p2p);
    case ScheduleKind::kCustom:
      break;
  }
  throw Error("the custom schedule has no generator: every rank's order comes with each batch (rank_orders)");
}

Schedule MakeSchedule(const std::string& name, int ranks, int microbatches, int chunks, bool p2p) {
  if (name == "custom")
    throw Error("unknown schedule 'custom' for a generator; valid: gpipe, 1f1b, interleaved, zb-h1");
  return MakeSchedule(ParseScheduleKind(name, "schedule"), ranks, microbatches, chunks, p2p);
}

}  // namespace loom
