#include "loom/pipeline/schedules.h"

namespace loom {

// Schedules share this prologue: p ranks, one stage each unless interleaved.
Schedule MakeGPipe(int p, int m, bool p2p) {
  Schedule s = EmptySchedule("gpipe", p, m, p);
  for (int r = 0; r < p; ++r) {
    for (int mb = 0; mb < m; ++mb) {
      s.ranks[r].push_back({ActionKind::kForward, r, mb});
    }
    for (int mb = 0; mb < m; ++mb) {
      s.ranks[r].push_back({ActionKind::kBackward, r, mb});
    }
  }
  if (p2p) AddPointToPoint(s);
  return s;
}

}  // namespace loom
