#include <fmt/format.h>

#include <algorithm>

#include "loom/error.h"
#include "loom/pipeline/schedules.h"

namespace loom {

// Megatron-LM's interleaved order (schedules.py): the k-th forward on a rank
// runs chunk (k / p) % v of microbatch (k / (p v)) p + k % p; backwards walk
// the chunks in reverse. Rank r warms up with 2 (p - r - 1) + (v - 1) p
// forwards (all of them when m == p).
Schedule MakeInterleaved(int p, int m, int v, bool p2p) {
  if (v < 1) {
    throw Error(fmt::format("interleaved schedule: virtual chunks per rank must be >= 1, got {}", v));
  }
  if (m % p != 0) {
    throw Error(
        fmt::format("interleaved schedule: microbatches ({}) must be a multiple of pipeline "
                    "ranks ({}), as in Megatron-LM",
                    m, p));
  }
  Schedule s = EmptySchedule("interleaved", p, m, p * v);
  for (int st = 0; st < p * v; ++st) {
    s.stage_rank[st] = st % p;
  }
  const int total = m * v;
  auto item = [&](int k, bool forward, int r) {
    int chunk = (k / p) % v;
    if (!forward) {
      chunk = v - 1 - chunk;
    }
    int mb = (k / (p * v)) * p + k % p;
    return Action{forward ? ActionKind::kForward : ActionKind::kBackward, chunk * p + r, mb};
  };
  for (int r = 0; r < p; ++r) {
    int warmup = m == p ? total : std::min(total, 2 * (p - r - 1) + (v - 1) * p);
    auto& a = s.ranks[r];
    for (int k = 0; k < warmup; ++k) {
      a.push_back(item(k, true, r));
    }
    for (int i = 0; i < total - warmup; ++i) {
      a.push_back(item(warmup + i, true, r));
      a.push_back(item(i, false, r));
    }
    for (int k = total - warmup; k < total; ++k) {
      a.push_back(item(k, false, r));
    }
  }
  s.name = v == 1 ? "1f1b" : "interleaved";
  if (p2p) AddPointToPoint(s);
  return s;
}

}  // namespace loom
