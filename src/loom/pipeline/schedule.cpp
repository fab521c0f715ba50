#include "loom/pipeline/schedule.h"

#include <fmt/format.h>

#include <algorithm>

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
    case ActionKind::kForward:
      return fmt::format("F{}@{}", a.microbatch, a.stage);
    case ActionKind::kBackward:
      return fmt::format("B{}@{}", a.microbatch, a.stage);
    case ActionKind::kBackwardData:
      return fmt::format("Bd{}@{}", a.microbatch, a.stage);
    case ActionKind::kBackwardWeight:
      return fmt::format("W{}@{}", a.microbatch, a.stage);
    case ActionKind::kSend:
      return fmt::format("send-{}{}@{}->r{}", a.payload == Payload::kActivation ? "act" : "grad", a.microbatch, a.stage,
                         a.peer);
    case ActionKind::kRecv:
      return fmt::format("recv-{}{}@{}<-r{}", a.payload == Payload::kActivation ? "act" : "grad", a.microbatch, a.stage,
                         a.peer);
    case ActionKind::kCollective:
      return fmt::format("grad-sync@{}.{}", a.stage, a.bucket);
    case ActionKind::kWait:
      return "wait";
    case ActionKind::kOptimizerStep:
      return "optimizer";
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

std::vector<StageEdge> Schedule::StageEdges() const {
  if (dag || !edges.empty()) return edges;
  std::vector<StageEdge> chain;
  for (int v = 1; v < num_stages(); ++v) chain.push_back({v - 1, v, {}});
  return chain;
}

std::pair<int, int> ProducerRange(const StageEdge& e, int k) {
  if (e.first.empty()) return {k, k + 1};
  return {e.first[k], e.first[k + 1]};
}

int ConsumerOf(const StageEdge& e, int j) {
  if (e.first.empty()) return j;
  return static_cast<int>(std::upper_bound(e.first.begin(), e.first.end(), j) - e.first.begin()) - 1;
}

std::vector<int> Producers(const StageEdge& e, int k) {
  if (!e.producers.empty()) return e.producers[k];
  auto [lo, hi] = ProducerRange(e, k);
  std::vector<int> out;
  for (int j = lo; j < hi; ++j) out.push_back(j);
  return out;
}

std::vector<int> Consumers(const StageEdge& e, int j, int consumers) {
  if (e.producers.empty()) return {ConsumerOf(e, j)};
  std::vector<int> out;
  for (int k = 0; k < consumers; ++k) {
    if (std::binary_search(e.producers[k].begin(), e.producers[k].end(), j)) out.push_back(k);
  }
  return out;
}

void AddPointToPoint(Schedule& s) {
  const auto edges = s.StageEdges();
  std::vector<std::vector<int>> in(s.num_stages()), out_edges(s.num_stages());
  // Per many-to-many edge, each producer microbatch's consumers (ascending), once.
  std::vector<std::vector<std::vector<int>>> consumers_of(edges.size());
  for (int e = 0; e < static_cast<int>(edges.size()); ++e) {
    in[edges[e].to].push_back(e);
    out_edges[edges[e].from].push_back(e);
    if (edges[e].producers.empty()) continue;
    consumers_of[e].assign(s.microbatches_of(edges[e].from), {});
    for (int k = 0; k < static_cast<int>(edges[e].producers.size()); ++k) {
      for (int j : edges[e].producers[k]) consumers_of[e][j].push_back(k);
    }
  }
  // On a many-to-many edge each (producer, consumer) pair is its own
  // message, named by the consumer's microbatch; elsewhere -1.
  auto for_consumers = [&](int e, int j, auto&& f) {
    if (edges[e].producers.empty()) return f(-1);
    for (int k : consumers_of[e][j]) f(k);
  };
  auto for_producers = [&](int e, int k, auto&& f) {
    if (!edges[e].producers.empty()) {
      for (int j : edges[e].producers[k]) f(j);
      return;
    }
    const auto [lo, hi] = ProducerRange(edges[e], k);
    for (int j = lo; j < hi; ++j) f(j);
  };
  auto pair_mb = [&](int e, int k) { return edges[e].producers.empty() ? -1 : k; };
  auto comm = [](ActionKind kind, int stage, int mb, int peer, Payload payload, int peer_stage, int peer_mb) {
    Action c{kind, stage, mb, peer, payload};
    c.peer_stage = peer_stage;
    c.peer_microbatch = peer_mb;
    return c;
  };
  std::vector<Action> out;
  for (int r = 0; r < s.num_ranks; ++r) {
    out.clear();
    out.reserve(3 * s.ranks[r].size());
    for (const Action& a : s.ranks[r]) {
      const bool fwd = a.kind == ActionKind::kForward;
      const bool bwd = a.kind == ActionKind::kBackward || a.kind == ActionKind::kBackwardData;
      if (fwd) {  // receive every remote input of this microbatch
        for (int e : in[a.stage]) {
          const int u = edges[e].from;
          if (s.stage_rank[u] == r) continue;
          for_producers(e, a.microbatch, [&](int j) {
            out.push_back(comm(ActionKind::kRecv, u, j, s.stage_rank[u], Payload::kActivation, a.stage,
                               pair_mb(e, a.microbatch)));
          });
        }
      }
      if (bwd) {  // receive the gradient of this output from every remote consumer
        for (int e : out_edges[a.stage]) {
          const int v = edges[e].to;
          if (s.stage_rank[v] == r) continue;
          for_consumers(e, a.microbatch, [&](int k) {
            out.push_back(comm(ActionKind::kRecv, v, a.microbatch, s.stage_rank[v], Payload::kGradient, a.stage, k));
          });
        }
      }
      out.push_back(a);
      if (fwd) {  // send the output to every remote consumer
        for (int e : out_edges[a.stage]) {
          const int v = edges[e].to;
          if (s.stage_rank[v] == r) continue;
          for_consumers(e, a.microbatch, [&](int k) {
            out.push_back(comm(ActionKind::kSend, a.stage, a.microbatch, s.stage_rank[v], Payload::kActivation, v, k));
          });
        }
      }
      if (bwd) {  // send the input gradients back to every remote producer
        for (int e : in[a.stage]) {
          const int u = edges[e].from;
          if (s.stage_rank[u] == r) continue;
          for_producers(e, a.microbatch, [&](int j) {
            out.push_back(
                comm(ActionKind::kSend, a.stage, j, s.stage_rank[u], Payload::kGradient, u, pair_mb(e, a.microbatch)));
          });
        }
      }
    }
    s.ranks[r].assign(out.begin(), out.end());
  }
}

void AddGradientSync(Schedule& s, int buckets) {
  std::vector<std::vector<int>> stages_of(s.num_ranks);  // each rank's stages, last first
  for (int v = s.num_stages() - 1; v >= 0; --v) stages_of[s.stage_rank[v]].push_back(v);
  for (int r = 0; r < s.num_ranks; ++r) {
    // Later stages finish their backward first, so their buckets go first.
    for (int v : stages_of[r]) {
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

namespace loom {

void AddOptimizerStep(Schedule& s) {
  for (auto& rank : s.ranks) {
    Action o;
    o.kind = ActionKind::kOptimizerStep;
    rank.push_back(o);
  }
}

}  // namespace loom
