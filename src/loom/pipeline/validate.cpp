#include "loom/pipeline/validate.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <tuple>

#include "loom/error.h"
#include "loom/pipeline/dependency_graph.h"

namespace loom {

void ValidateSchedule(const Schedule& s) {
  if (static_cast<int>(s.ranks.size()) != s.num_ranks) {
    throw Error(fmt::format("schedule {}: {} action lists for {} ranks", s.name, s.ranks.size(), s.num_ranks));
  }
  ValidateSchedule(s, BuildDependencies(s));  // missing producers and duplicates throw there
}

ActionOrder ValidateSchedule(const Schedule& s, const DependencyGraph& g) {
  // Completeness: one forward and one backward per stage and microbatch.
  std::vector<size_t> off(s.num_stages() + 1, 0);
  for (int v = 0; v < s.num_stages(); ++v) off[v + 1] = off[v] + s.microbatches_of(v);
  std::vector<int> fwd(off.back(), 0);
  std::vector<int> bwd(fwd.size(), 0), bwd_w(fwd.size(), 0);
  for (int r = 0; r < s.num_ranks; ++r) {
    for (const Action& a : s.ranks[r]) {
      if (!a.is_compute()) continue;
      size_t k = off[a.stage] + a.microbatch;
      if (a.kind == ActionKind::kForward) ++fwd[k];
      if (a.kind == ActionKind::kBackward || a.kind == ActionKind::kBackwardData) ++bwd[k];
      if (a.kind == ActionKind::kBackward || a.kind == ActionKind::kBackwardWeight) ++bwd_w[k];
    }
  }
  for (int v = 0; v < s.num_stages(); ++v) {
    for (int mb = 0; mb < s.microbatches_of(v); ++mb) {
      size_t k = off[v] + mb;
      if (fwd[k] != 1 || bwd[k] != 1 || bwd_w[k] != 1) {
        throw Error(
            fmt::format("schedule {}: rank {}: stage {} microbatch {} has {} forward(s), {} backward(s) "
                        "and {} weight gradient(s); each must be exactly 1",
                        s.name, s.stage_rank[v], v, mb, fwd[k], bwd[k], bwd_w[k]));
      }
    }
  }
  // Forward before backward on the same rank (same stream: list order).
  std::vector<int> forward_on(fwd.size(), -1);  // per (stage, microbatch): the rank its forward was seen on
  for (int r = 0; r < s.num_ranks; ++r) {
    for (int i = 0; i < static_cast<int>(s.ranks[r].size()); ++i) {
      const Action& a = s.ranks[r][i];
      if (a.kind == ActionKind::kForward) {
        forward_on[off[a.stage] + a.microbatch] = r;
      } else if ((a.kind == ActionKind::kBackward || a.kind == ActionKind::kBackwardData) &&
                 forward_on[off[a.stage] + a.microbatch] != r) {
        throw Error(
            fmt::format("schedule {}: rank {} action {} ({}) comes before its forward", s.name, r, i, ActionName(a)));
      }
    }
  }
  // Sends and receives match one to one, on the right peers. BuildDependencies
  // gave every receive its send (same payload, stages and microbatch; no two
  // receives of one message): what is left is that every send is received,
  // and by the rank it names.
  auto other_end = [](const Action& a) {
    return a.peer_stage >= 0 ? a.peer_stage : (a.payload == Payload::kActivation ? a.stage + 1 : a.stage - 1);
  };
  std::vector<int> receiver(g.size(), -1);  // per send id: the rank receiving it
  for (int r = 0; r < s.num_ranks; ++r) {
    for (int i = 0; i < static_cast<int>(s.ranks[r].size()); ++i) {
      if (s.ranks[r][i].kind != ActionKind::kRecv) continue;
      const int id = g.id(r, i);
      receiver[g.dep_id[g.dep_begin[id]]] = r;  // its first dependency is its send
    }
  }
  for (int r = 0; r < s.num_ranks; ++r) {
    for (int i = 0; i < static_cast<int>(s.ranks[r].size()); ++i) {
      const Action& a = s.ranks[r][i];
      if (a.kind != ActionKind::kSend) continue;
      const int to = other_end(a);
      if (to < 0 || to >= s.num_stages() || s.stage_rank[to] != a.peer) {
        throw Error(fmt::format("schedule {}: rank {}: {} goes to rank {}, which does not hold stage {}", s.name, r,
                                ActionName(a), a.peer, to));
      }
      if (receiver[g.id(r, i)] != a.peer) {
        throw Error(fmt::format("schedule {}: rank {} never receives the {} of microbatch {} that stage {} sends it",
                                s.name, a.peer, a.payload == Payload::kActivation ? "activation" : "gradient",
                                a.microbatch, a.stage));
      }
    }
  }
  // No cyclic wait: Kahn's algorithm over stream order and data dependencies.
  ActionOrder order = TopologicalOrder(g);
  if (order.complete(g)) return order;
  const int n = g.size();
  std::vector<bool> ran(n, false);
  for (int id : order.order) ran[id] = true;
  // Report the first blocked action whose stream predecessor has run.
  for (int id = 0; id < n; ++id) {
    if (ran[id] || (g.stream_prev[id] >= 0 && !ran[g.stream_prev[id]])) {
      continue;
    }
    int r = g.rank[id];
    std::string waits;
    for (int d = g.dep_begin[id]; d < g.dep_begin[id + 1]; ++d) {
      int p = g.dep_id[d];
      if (!ran[p]) {
        int pr = g.rank[p];
        waits += fmt::format("{}rank {} action {} ({})", waits.empty() ? "" : ", ", pr, p - g.offset[pr],
                             ActionName(s.ranks[pr][p - g.offset[pr]]));
      }
    }
    throw Error(fmt::format("schedule {} deadlocks: rank {} action {} ({}) waits for {}, which can never run", s.name,
                            r, id - g.offset[r], ActionName(s.ranks[r][id - g.offset[r]]), waits));
  }
  throw Error(fmt::format("schedule {} deadlocks", s.name));
}

std::string MessageOrderMismatch(const Schedule& s) {
  // A message is (payload, sending stage, receiving stage, microbatch), the
  // receiving stage resolved as the runtime's tags resolve it.
  using Message = std::tuple<int, int, int, int>;
  auto message = [](const Action& a) {
    const bool act = a.payload == Payload::kActivation;
    const int to = a.peer_stage >= 0 ? a.peer_stage : (act ? a.stage + 1 : a.stage - 1);
    return Message{static_cast<int>(a.payload), a.stage, to, a.microbatch};
  };
  std::map<std::pair<int, int>, std::vector<std::pair<Message, std::string>>> sent, received;  // (from, to)
  for (int r = 0; r < s.num_ranks; ++r) {
    for (const Action& a : s.ranks[r]) {
      if (a.kind == ActionKind::kSend) sent[{r, a.peer}].push_back({message(a), ActionName(a)});
      if (a.kind == ActionKind::kRecv) received[{a.peer, r}].push_back({message(a), ActionName(a)});
    }
  }
  for (const auto& [pair, sends] : sent) {
    const auto& recvs = received[pair];
    for (size_t i = 0; i < std::min(sends.size(), recvs.size()); ++i) {
      if (sends[i].first != recvs[i].first) {
        return fmt::format("rank {} sends {} as its message {} to rank {}, which receives {} there", pair.first,
                           sends[i].second, i, pair.second, recvs[i].second);
      }
    }
  }
  return "";
}

}  // namespace loom
