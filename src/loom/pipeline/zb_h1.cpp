#include <algorithm>

#include "loom/pipeline/schedules.h"

namespace loom {

// ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", 2024): the order of
// forwards and backward-data passes is 1F1B's; rank r runs the weight pass of
// microbatch k right after the backward-data of microbatch k + r, and the r
// deferred weight passes at the end fill the drain. Every rank then holds at
// most p microbatches' activations (1F1B's stage-0 peak), and with
// F = B_data = B_weight the bubble is (p - 1) F, a third of 1F1B's.
Schedule MakeZbH1(int p, int m, bool p2p) {
  Schedule s = EmptySchedule("zb-h1", p, m, p);
  for (int r = 0; r < p; ++r) {
    const int warmup = std::min(p - r - 1, m);
    const int lag = r;
    auto& a = s.ranks[r];
    int next_w = 0, next_bd = 0;
    auto backward = [&] {
      a.push_back({ActionKind::kBackwardData, r, next_bd++});
      if (next_bd - 1 - lag >= 0) {
        a.push_back({ActionKind::kBackwardWeight, r, next_w++});
      }
    };
    for (int mb = 0; mb < warmup; ++mb) {
      a.push_back({ActionKind::kForward, r, mb});
    }
    for (int i = 0; i < m - warmup; ++i) {
      a.push_back({ActionKind::kForward, r, warmup + i});
      backward();
    }
    while (next_bd < m) {
      backward();
    }
    while (next_w < m) {
      a.push_back({ActionKind::kBackwardWeight, r, next_w++});
    }
  }
  if (p2p) AddPointToPoint(s);
  return s;
}

}  // namespace loom
