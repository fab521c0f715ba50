#include "loom/strategies/mmscale/inter_reorder.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "loom/algo/subset_sum.h"
#include "loom/error.h"
#include "loom/pipeline/schedules.h"

namespace loom {

namespace {

// End times over a PipelineShape with durations from the microbatch placed at
// each position (or a placeholder while the position is empty).
class Recurrence {
 public:
  Recurrence(const std::vector<MicrobatchTimes>& mbs, const PipelineShape& shape) : mbs_(mbs), nodes_(shape.nodes()) {
    exact_end_.assign(nodes_.size(), -1.0);
    call_end_.assign(nodes_.size(), 0.0);
    call_stamp_.assign(nodes_.size(), 0);
  }

  // Microbatch at each position (-1: not placed); placeholders for the rest.
  void SetPlacement(const std::vector<int>& at, const std::vector<double>& pf, const std::vector<double>& pb) {
    at_ = &at;
    pf_ = &pf;
    pb_ = &pb;
    ++stamp_;
  }

  double End(int i) {
    bool exact;
    return End(i, exact);
  }
  // Ready time of action i's input from another rank; -1 when it has none.
  double Ready(int i) {
    const int d = nodes_[i].dep;
    if (d < 0 || nodes_[d].rank == nodes_[i].rank) return -1;
    return End(d);
  }
  double Duration(int i) const {
    const auto& n = nodes_[i];
    const int mb = (*at_)[n.position];
    if (mb < 0) return n.forward ? (*pf_)[n.stage] : (*pb_)[n.stage];
    return n.forward ? mbs_[mb].forward_s[n.stage] : mbs_[mb].backward_s[n.stage];
  }

 private:
  // Memoised: values that depend only on placed microbatches are final;
  // others are valid for the current placement only.
  double End(int i, bool& exact) {
    if (exact_end_[i] >= 0) {
      exact = true;
      return exact_end_[i];
    }
    if (call_stamp_[i] == stamp_) {
      exact = false;
      return call_end_[i];
    }
    const auto& n = nodes_[i];
    bool e1 = true, e2 = true;
    const double a = n.prev >= 0 ? End(n.prev, e1) : 0.0;
    const double b = n.dep >= 0 ? End(n.dep, e2) : 0.0;
    const double end = std::max(a, b) + Duration(i);
    exact = e1 && e2 && (*at_)[n.position] >= 0;
    if (exact) {
      exact_end_[i] = end;
    } else {
      call_end_[i] = end;
      call_stamp_[i] = stamp_;
    }
    return end;
  }

  const std::vector<MicrobatchTimes>& mbs_;
  const std::vector<PipelineShape::Node>& nodes_;
  const std::vector<int>* at_ = nullptr;
  const std::vector<double>* pf_ = nullptr;
  const std::vector<double>* pb_ = nullptr;
  std::vector<double> exact_end_, call_end_;
  std::vector<int> call_stamp_;
  int stamp_ = 0;
};

void CheckInput(const std::vector<MicrobatchTimes>& mbs, int ranks, int vpp) {
  if (ranks < 1 || vpp < 1)
    throw Error(fmt::format("inter-microbatch reordering: ranks {} and vpp {} must be >= 1", ranks, vpp));
  const size_t stages = static_cast<size_t>(ranks) * vpp;
  for (size_t i = 0; i < mbs.size(); ++i) {
    if (mbs[i].forward_s.size() != stages || mbs[i].backward_s.size() != stages) {
      throw Error(
          fmt::format("inter-microbatch reordering: microbatch {} has {} forward and {} backward stage "
                      "times; the pipeline has {} stages",
                      i, mbs[i].forward_s.size(), mbs[i].backward_s.size(), stages));
    }
  }
  if (vpp > 1 && mbs.size() % ranks != 0) {
    throw Error(
        fmt::format("inter-microbatch reordering: interleaving needs the microbatch count ({}) to be a "
                    "multiple of the ranks ({})",
                    mbs.size(), ranks));
  }
}

// One or two microbatches: the smaller first (nothing to fill).
std::vector<int> SmallOrder(const std::vector<MicrobatchTimes>& mbs) {
  std::vector<int> order(mbs.size());
  std::iota(order.begin(), order.end(), 0);
  if (mbs.size() == 2 && mbs[1].forward_s[0] < mbs[0].forward_s[0]) std::swap(order[0], order[1]);
  return order;
}

}  // namespace

PipelineShape::PipelineShape(int ranks, int l, int vpp) : ranks_(ranks), microbatches_(l), vpp_(vpp) {
  if (ranks < 1 || vpp < 1 || l < 1) {
    throw Error(fmt::format("pipeline shape: ranks {}, microbatches {} and vpp {} must be >= 1", ranks, l, vpp));
  }
  const int stages = ranks * vpp;
  const Schedule s =
      MakeSchedule(vpp == 1 ? ScheduleKind::kOneFOneB : ScheduleKind::kInterleaved, ranks, l, vpp, /*p2p=*/false);
  std::vector<int> index(2 * stages * l, -1);
  auto key = [&](bool f, int stage, int pos) { return (pos * stages + stage) * 2 + (f ? 1 : 0); };
  nodes_.reserve(2 * stages * l);
  for (int r = 0; r < ranks; ++r) {
    int prev = -1;
    for (const Action& a : s.ranks[r]) {
      if (!a.is_compute()) continue;
      Node n;
      n.forward = a.kind == ActionKind::kForward;
      n.stage = a.stage;
      n.position = a.microbatch;
      n.rank = r;
      n.prev = prev;
      prev = static_cast<int>(nodes_.size());
      index[key(n.forward, n.stage, n.position)] = prev;
      nodes_.push_back(n);
    }
  }
  for (Node& n : nodes_) {
    if (n.forward) {
      n.dep = n.stage > 0 ? index[key(true, n.stage - 1, n.position)] : -1;
    } else {
      n.dep = n.stage + 1 < stages ? index[key(false, n.stage + 1, n.position)] : index[key(true, n.stage, n.position)];
    }
  }
  forwards_at_.assign(l, {});
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].rank != 0) continue;
    if (nodes_[i].forward) forwards_at_[nodes_[i].position].push_back(static_cast<int>(rank0_.size()));
    rank0_.push_back(static_cast<int>(i));
  }
}

std::vector<int> InterReorder(const std::vector<MicrobatchTimes>& mbs, int ranks, int vpp) {
  CheckInput(mbs, ranks, vpp);
  if (mbs.size() <= 2) return SmallOrder(mbs);
  return InterReorder(mbs, PipelineShape(ranks, static_cast<int>(mbs.size()), vpp));
}

std::vector<int> InterReorder(const std::vector<MicrobatchTimes>& mbs, const PipelineShape& shape) {
  const int ranks = shape.ranks(), vpp = shape.vpp();
  CheckInput(mbs, ranks, vpp);
  const int l = static_cast<int>(mbs.size());
  if (shape.microbatches() != l) {
    throw Error(fmt::format("inter-microbatch reordering: {} microbatches for a pipeline shape of {}", l,
                            shape.microbatches()));
  }
  if (l <= 2) return SmallOrder(mbs);
  const int S = ranks * vpp;
  // Size of a microbatch = its forward time on the first rank (every chunk).
  std::vector<double> size(l, 0.0);
  for (int i = 0; i < l; ++i) {
    for (int v = 0; v < S; v += ranks) size[i] += mbs[i].forward_s[v];
  }
  auto by_size = [&](int a, int b) { return size[a] < size[b] || (size[a] == size[b] && a < b); };
  std::vector<int> left(l);
  std::iota(left.begin(), left.end(), 0);
  std::sort(left.begin(), left.end(), by_size);

  std::vector<int> at(l, -1);  // position -> microbatch
  int placed = 0;
  at[placed++] = left.front();  // line 3: the smallest first
  left.erase(left.begin());
  // Line 4: the smallest p - 1 go last (fewer when there are not enough);
  // they run largest to smallest so the last intervals are the shortest.
  const int n_rear = std::min<int>(ranks - 1, static_cast<int>(left.size()));
  std::vector<int> rear(left.begin(), left.begin() + n_rear);
  std::reverse(rear.begin(), rear.end());
  left.erase(left.begin(), left.begin() + n_rear);

  Recurrence rec(mbs, shape);
  // Placeholders: mean stage times of the microbatches not yet placed (rear
  // included), kept as running sums.
  std::vector<double> sum_f(S, 0.0), sum_b(S, 0.0), pf(S), pb(S);
  int unplaced = l - 1;
  for (int i = 0; i < l; ++i) {
    if (i == at[0]) continue;
    for (int s = 0; s < S; ++s) {
      sum_f[s] += mbs[i].forward_s[s];
      sum_b[s] += mbs[i].backward_s[s];
    }
  }
  auto mark_placed = [&](int i) {
    for (int s = 0; s < S; ++s) {
      sum_f[s] -= mbs[i].forward_s[s];
      sum_b[s] -= mbs[i].backward_s[s];
    }
    --unplaced;
  };
  auto place_holders = [&]() {
    for (int s = 0; s < S; ++s) {
      pf[s] = sum_f[s] / std::max(unplaced, 1);
      pb[s] = sum_b[s] / std::max(unplaced, 1);
    }
    rec.SetPlacement(at, pf, pb);
  };
  const std::vector<int>& r0 = shape.rank0();
  const auto& nodes = shape.nodes();

  // i = 1: the window between the first forward and the first backward on
  // the first rank is filled by the next forwards of the warm-up (p - 1 of
  // them for 1F1B): choose that many whose sizes sum closest to it.
  if (!left.empty()) {
    place_holders();
    int first_backward = -1, warm_positions = 0;
    double own_chunks_s = 0;
    for (int i : r0) {
      if (!nodes[i].forward) {
        first_backward = i;
        break;
      }
      if (nodes[i].position == 0) {
        own_chunks_s += rec.Duration(i);
      } else if (nodes[i].position > warm_positions) {
        warm_positions = nodes[i].position;
      }
    }
    double window = 0;
    if (first_backward >= 0) {
      window =
          std::max(0.0, rec.Ready(first_backward) - rec.End(r0.front()) - (own_chunks_s - rec.Duration(r0.front())));
    }
    const int k = std::min<int>(warm_positions, static_cast<int>(left.size()));
    std::vector<double> sizes;
    for (int i : left) sizes.push_back(size[i]);
    // 128 grid steps (sums within k/128 of the span): the sizes are
    // predictions, finer sums buy nothing.
    std::vector<int> pick = ClosestSubsetOfSize(sizes, k, window, 128);
    std::vector<int> chosen;
    for (int j : pick) chosen.push_back(left[j]);
    std::sort(chosen.begin(), chosen.end(), by_size);  // ascending: stages start early
    for (int c : chosen) {
      at[placed++] = c;
      mark_placed(c);
    }
    for (int j = static_cast<int>(pick.size()) - 1; j >= 0; --j) left.erase(left.begin() + pick[j]);
  }
  // i >= 2: the window a forward of the next position fills on the first rank
  // (per chunk: the gap between the action before it and the input of the
  // action after it); pick the microbatch whose size is closest.
  const auto& fwd_at = shape.forwards_at();
  while (!left.empty()) {
    place_holders();
    double window = 0;
    for (int j : fwd_at[placed]) {
      const double before = j > 0 ? rec.End(r0[j - 1]) : 0.0;
      if (j + 1 < static_cast<int>(r0.size())) window += std::max(0.0, rec.Ready(r0[j + 1]) - before);
    }
    size_t best = 0;
    for (size_t c = 1; c < left.size(); ++c) {
      if (std::abs(size[left[c]] - window) < std::abs(size[left[best]] - window)) best = c;
    }
    at[placed++] = left[best];
    mark_placed(left[best]);
    left.erase(left.begin() + best);
  }
  for (int c : rear) at[placed++] = c;
  return at;
}

double PipelineTime_s(const std::vector<MicrobatchTimes>& mbs, const std::vector<int>& order, int ranks, int vpp) {
  CheckInput(mbs, ranks, vpp);
  if (order.size() != mbs.size()) throw Error("pipeline time: the order must list every microbatch once");
  if (mbs.empty()) return 0;
  const PipelineShape shape(ranks, static_cast<int>(mbs.size()), vpp);
  Recurrence rec(mbs, shape);
  const std::vector<double> none;
  rec.SetPlacement(order, none, none);
  double t = 0;
  for (int i = 0; i < static_cast<int>(shape.nodes().size()); ++i) t = std::max(t, rec.End(i));
  return t;
}

}  // namespace loom
