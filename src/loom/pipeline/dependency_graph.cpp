#include "loom/pipeline/dependency_graph.h"

#include <fmt/format.h>

#include "loom/error.h"

namespace loom {

namespace {

// Index of the producer slots: per (stage, microbatch), which action of each kind.
enum Slot { kF, kB, kBd, kW, kSendAct, kSendGrad, kRecvAct, kRecvGrad, kNumSlots };

int SlotOf(const Action& a) {
  switch (a.kind) {
    case ActionKind::kForward: return kF;
    case ActionKind::kBackward: return kB;
    case ActionKind::kBackwardData: return kBd;
    case ActionKind::kBackwardWeight: return kW;
    case ActionKind::kSend: return a.payload == Payload::kActivation ? kSendAct : kSendGrad;
    case ActionKind::kRecv: return a.payload == Payload::kActivation ? kRecvAct : kRecvGrad;
    default: return -1;
  }
}

}  // namespace

DependencyGraph BuildDependencies(const Schedule& s, bool overlap) {
  DependencyGraph g;
  const int stages = s.num_stages(), m = s.num_microbatches;
  g.offset.push_back(0);
  for (int r = 0; r < s.num_ranks; ++r) {
    g.offset.push_back(g.offset.back() + static_cast<int>(s.ranks[r].size()));
  }
  const int n = g.offset.back();
  g.rank.resize(n);
  g.stream_prev.assign(n, -1);
  std::vector<int> slot(static_cast<size_t>(stages) * m * kNumSlots, -1);
  auto at = [&](int kind_slot, int stage, int mb) -> int& {
    return slot[(static_cast<size_t>(stage) * m + mb) * kNumSlots + kind_slot];
  };
  auto describe = [&](int r, int i) {
    return fmt::format("rank {} action {} ({})", r, i, ActionName(s.ranks[r][i]));
  };
  std::vector<std::vector<int>> last_backward(s.num_ranks, std::vector<int>(stages, -1));
  for (int r = 0; r < s.num_ranks; ++r) {
    int prev_compute = -1, prev_comm = -1;
    for (int i = 0; i < static_cast<int>(s.ranks[r].size()); ++i) {
      const Action& a = s.ranks[r][i];
      int id = g.offset[r] + i;
      g.rank[id] = r;
      int& prev = a.on_comm_stream() ? prev_comm : prev_compute;
      g.stream_prev[id] = prev;
      prev = id;
      int k = SlotOf(a);
      if (k < 0) {
        continue;
      }
      if (a.stage < 0 || a.stage >= stages || a.microbatch < 0 || a.microbatch >= m) {
        throw Error(fmt::format("{}: stage or microbatch out of range ({} stages, {} microbatches)",
                                describe(r, i), stages, m));
      }
      if (a.is_compute() && s.stage_rank[a.stage] != r) {
        throw Error(fmt::format("{}: stage {} belongs to rank {}", describe(r, i), a.stage,
                                s.stage_rank[a.stage]));
      }
      int& cell = at(k, a.stage, a.microbatch);
      if (cell >= 0) {
        throw Error(fmt::format("{}: duplicate of rank {} action {}", describe(r, i), g.rank[cell],
                                cell - g.offset[g.rank[cell]]));
      }
      cell = id;
      if (a.kind == ActionKind::kBackward || a.kind == ActionKind::kBackwardWeight) {
        last_backward[r][a.stage] = id;
      }
    }
  }

  g.dep_begin.push_back(0);
  std::vector<int> collectives_of_rank;
  for (int r = 0; r < s.num_ranks; ++r) {
    collectives_of_rank.clear();
    for (int i = 0; i < static_cast<int>(s.ranks[r].size()); ++i) {
      const Action& a = s.ranks[r][i];
      auto need = [&](int producer, const char* what, double fraction = 1.0) {
        if (producer < 0) {
          throw Error(fmt::format("{}: no {} to wait for", describe(r, i), what));
        }
        g.dep_id.push_back(producer);
        g.dep_fraction.push_back(fraction);
      };
      const int v = a.stage, mb = a.microbatch;
      const bool local_prev = v > 0 && s.stage_rank[std::max(v - 1, 0)] == r;
      const bool local_next = v + 1 < stages && s.stage_rank[std::min(v + 1, stages - 1)] == r;
      switch (a.kind) {
        case ActionKind::kForward:
          if (v > 0) {
            need(local_prev ? at(kF, v - 1, mb) : at(kRecvAct, v - 1, mb),
                 local_prev ? "forward of the previous stage" : "receive of its input activation");
          }
          break;
        case ActionKind::kBackward:
        case ActionKind::kBackwardData:
          need(at(kF, v, mb), "forward of the same microbatch");
          if (v + 1 < stages) {
            int next = at(kB, v + 1, mb) >= 0 ? at(kB, v + 1, mb) : at(kBd, v + 1, mb);
            need(local_next ? next : at(kRecvGrad, v + 1, mb),
                 local_next ? "backward of the next stage" : "receive of its output gradient");
          }
          break;
        case ActionKind::kBackwardWeight:
          need(at(kBd, v, mb), "backward-data of the same microbatch");
          break;
        case ActionKind::kSend:
          if (a.payload == Payload::kActivation) {
            need(at(kF, v, mb), "forward producing the activation");
          } else {
            need(at(kB, v, mb) >= 0 ? at(kB, v, mb) : at(kBd, v, mb), "backward producing the gradient");
          }
          break;
        case ActionKind::kRecv:
          need(at(a.payload == Payload::kActivation ? kSendAct : kSendGrad, v, mb), "matching send");
          break;
        case ActionKind::kCollective: {
          int buckets = 0;
          for (const Action& b : s.ranks[r]) {
            buckets += b.kind == ActionKind::kCollective && b.stage == v;
          }
          need(last_backward[r][v], "backward of the stage",
               overlap ? static_cast<double>(a.bucket + 1) / buckets : 1.0);
          collectives_of_rank.push_back(g.offset[r] + i);
          break;
        }
        case ActionKind::kWait:
          for (int c : collectives_of_rank) {
            need(c, "collective");
          }
          break;
      }
      g.dep_begin.push_back(static_cast<int>(g.dep_id.size()));
    }
  }
  return g;
}

}  // namespace loom
