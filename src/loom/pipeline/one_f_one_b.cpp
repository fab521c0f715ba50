#include <algorithm>

#include "loom/pipeline/schedules.h"

namespace loom {

Schedule MakeOneFOneB(int p, int m, bool p2p) {
  Schedule s = EmptySchedule("1f1b", p, m, p);
  for (int r = 0; r < p; ++r) {
    const int warmup = std::min(p - r - 1, m);
    auto& a = s.ranks[r];
    for (int mb = 0; mb < warmup; ++mb) {
      a.push_back({ActionKind::kForward, r, mb});
    }
    for (int i = 0; i < m - warmup; ++i) {
      a.push_back({ActionKind::kForward, r, warmup + i});
      a.push_back({ActionKind::kBackward, r, i});
    }
    for (int mb = m - warmup; mb < m; ++mb) {
      a.push_back({ActionKind::kBackward, r, mb});
    }
  }
  if (p2p) AddPointToPoint(s);
  return s;
}

}  // namespace loom
