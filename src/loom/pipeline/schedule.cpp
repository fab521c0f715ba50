#include "loom/pipeline/schedule.h"

#include <fmt/format.h>

namespace loom {

int Schedule::num_actions() const {
  int n = 0;
  for (const auto& r : ranks) {
    n += static_cast<int>(r.size());
  }
  return n;
}

std::string ActionName(const Action& a) {
  switch (a.kind) {
    case ActionKind::kForward: return fmt::format("F{}@{}", a.microbatch, a.stage);
    case ActionKind::kBackward: return fmt::format("B{}@{}", a.microbatch, a.stage);
    case ActionKind::kBackwardData: return fmt::format("Bd{}@{}", a.microbatch, a.stage);
    case ActionKind::kBackwardWeight: return fmt::format("W{}@{}", a.microbatch, a.stage);
    case ActionKind::kSend:
      return fmt::format("send-{}{}@{}->r{}", a.payload == Payload::kActivation ? "act" : "grad",
                         a.microbatch, a.stage, a.peer);
    case ActionKind::kRecv:
      return fmt::format("recv-{}{}@{}<-r{}", a.payload == Payload::kActivation ? "act" : "grad",
                         a.microbatch, a.stage, a.peer);
    case ActionKind::kCollective: return fmt::format("grad-sync@{}.{}", a.stage, a.bucket);
    case ActionKind::kWait: return "wait";
  }
  return "?";
}

std::string ComputeOrder(const Schedule& s) {
  std::string out;
  const bool multi = s.num_stages() > s.num_ranks;
  for (int r = 0; r < s.num_ranks; ++r) {
    out += fmt::format("rank{}:", r);
    for (const auto& a : s.ranks[r]) {
      if (!a.is_compute()) {
        continue;
      }
      const char* k = a.kind == ActionKind::kForward        ? "F"
                      : a.kind == ActionKind::kBackward     ? "B"
                      : a.kind == ActionKind::kBackwardData ? "Bd"
                                                            : "W";
      out += multi ? fmt::format(" {}{}.{}", k, a.microbatch, a.stage) : fmt::format(" {}{}", k, a.microbatch);
    }
    out += "\n";
  }
  return out;
}

void AddPointToPoint(Schedule& s) {
  const int last = s.num_stages() - 1;
  for (int r = 0; r < s.num_ranks; ++r) {
    std::vector<Action> out;
    for (const Action& a : s.ranks[r]) {
      bool fwd = a.kind == ActionKind::kForward;
      bool bwd = a.kind == ActionKind::kBackward || a.kind == ActionKind::kBackwardData;
      if (fwd && a.stage > 0 && s.stage_rank[a.stage - 1] != r) {
        out.push_back({ActionKind::kRecv, a.stage - 1, a.microbatch, s.stage_rank[a.stage - 1],
                       Payload::kActivation});
      }
      if (bwd && a.stage < last && s.stage_rank[a.stage + 1] != r) {
        out.push_back({ActionKind::kRecv, a.stage + 1, a.microbatch, s.stage_rank[a.stage + 1],
                       Payload::kGradient});
      }
      out.push_back(a);
      if (fwd && a.stage < last && s.stage_rank[a.stage + 1] != r) {
        out.push_back({ActionKind::kSend, a.stage, a.microbatch, s.stage_rank[a.stage + 1],
                       Payload::kActivation});
      }
      if (bwd && a.stage > 0 && s.stage_rank[a.stage - 1] != r) {
        out.push_back({ActionKind::kSend, a.stage, a.microbatch, s.stage_rank[a.stage - 1],
                       Payload::kGradient});
      }
    }
    s.ranks[r] = std::move(out);
  }
}

void AddGradientSync(Schedule& s, int buckets) {
  for (int r = 0; r < s.num_ranks; ++r) {
    // Later stages finish their backward first, so their buckets go first.
    for (int v = s.num_stages() - 1; v >= 0; --v) {
      if (s.stage_rank[v] != r) {
        continue;
      }
      for (int b = 0; b < buckets; ++b) {
        Action c;
        c.kind = ActionKind::kCollective;
        c.stage = v;
        c.bucket = b;
        s.ranks[r].push_back(c);
      }
    }
    Action w;
    w.kind = ActionKind::kWait;
    s.ranks[r].push_back(w);
  }
}

}  // namespace loom
