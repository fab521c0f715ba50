#include "loom/pipeline/dependency_graph.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "loom/error.h"

namespace loom {

namespace {

// Compute producer slots per (stage, microbatch).
enum ComputeSlot { kF, kB, kBd, kW, kNumComputeSlots };
// Communication slots per (edge, message): a producer microbatch, or on a
// many-to-many edge a (producer, consumer) pair.
enum CommSlot { kSendAct, kSendGrad, kRecvAct, kRecvGrad, kNumCommSlots };

int ComputeSlotOf(ActionKind k) {
  switch (k) {
    case ActionKind::kForward:
      return kF;
    case ActionKind::kBackward:
      return kB;
    case ActionKind::kBackwardData:
      return kBd;
    case ActionKind::kBackwardWeight:
      return kW;
    default:
      return -1;
  }
}

}  // namespace

// About 250 lines, on purpose: one pass that checks the stage edges and
// builds the graph, its steps sharing the same slot indexes (flat offsets per
// stage and per edge, the many-to-many message pairs); the validator and the
// simulator both read the graph it returns.
DependencyGraph BuildDependencies(const Schedule& s, bool overlap, bool sync_stream) {
  DependencyGraph g;
  const int stages = s.num_stages();
  const auto edges = s.StageEdges();
  const int num_edges = static_cast<int>(edges.size());
  if (!s.stage_microbatches.empty() && static_cast<int>(s.stage_microbatches.size()) != stages) {
    throw Error(
        fmt::format("schedule {}: {} microbatch counts for {} stages", s.name, s.stage_microbatches.size(), stages));
  }
  // Flat slot offsets: compute slots per stage, communication slots per edge.
  std::vector<size_t> stage_off(stages + 1, 0), edge_off(num_edges + 1, 0);
  for (int v = 0; v < stages; ++v) stage_off[v + 1] = stage_off[v] + s.microbatches_of(v);
  std::vector<std::vector<int>> in(stages), out(stages);
  std::map<std::pair<int, int>, int> edge_index;
  std::vector<std::map<std::pair<int, int>, int>> pair_of(num_edges);  // many-to-many: (j, k) -> message
  for (int e = 0; e < num_edges; ++e) {
    const StageEdge& se = edges[e];
    if (se.from < 0 || se.from >= stages || se.to < 0 || se.to >= stages || se.from == se.to) {
      throw Error(
          fmt::format("schedule {}: edge {} -> {} names a stage outside 0..{}", s.name, se.from, se.to, stages - 1));
    }
    const int mu = s.microbatches_of(se.from), mv = s.microbatches_of(se.to);
    bool ok;
    if (!se.producers.empty()) {
      ok = se.first.empty() && static_cast<int>(se.producers.size()) == mv;
      for (int k = 0; ok && k < mv; ++k) {
        const auto& list = se.producers[k];
        ok = std::is_sorted(list.begin(), list.end()) && std::adjacent_find(list.begin(), list.end()) == list.end();
        for (int j : list) {
          if (j < 0 || j >= mu) {
            ok = false;
            break;
          }
          pair_of[e].emplace(std::make_pair(j, k), static_cast<int>(pair_of[e].size()));
        }
      }
    } else {
      ok = se.first.empty() ? mu == mv
                            : (static_cast<int>(se.first.size()) == mv + 1 && se.first.front() == 0 &&
                               se.first.back() == mu && std::is_sorted(se.first.begin(), se.first.end()));
    }
    if (!ok) {
      throw Error(
          fmt::format("schedule {}: edge {} -> {} does not map the {} microbatches of stage {} onto the {} "
                      "of stage {}",
                      s.name, se.from, se.to, mu, se.from, mv, se.to));
    }
    edge_off[e + 1] = edge_off[e] + (se.producers.empty() ? mu : static_cast<int>(pair_of[e].size()));
    in[se.to].push_back(e);
    out[se.from].push_back(e);
    edge_index[{se.from, se.to}] = e;
  }
  // On many-to-many edges a producer microbatch may feed only some consumers'
  // edges, but it must feed one: else its backward would get no gradient.
  for (int v = 0; v < stages; ++v) {
    const bool explicit_out =
        std::any_of(out[v].begin(), out[v].end(), [&](int e) { return !edges[e].producers.empty(); });
    if (!explicit_out) continue;
    for (int j = 0; j < s.microbatches_of(v); ++j) {
      bool fed = false;
      for (int e : out[v]) fed = fed || !Consumers(edges[e], j, s.microbatches_of(edges[e].to)).empty();
      if (!fed) {
        throw Error(fmt::format("schedule {}: microbatch {} of stage {} feeds no consumer on its many-to-many edges",
                                s.name, j, v));
      }
    }
  }
  g.offset.push_back(0);
  for (int r = 0; r < s.num_ranks; ++r) {
    g.offset.push_back(g.offset.back() + static_cast<int>(s.ranks[r].size()));
  }
  const int n = g.offset.back();
  g.rank.resize(n);
  g.stream_prev.assign(n, -1);
  std::vector<int> compute(stage_off[stages] * kNumComputeSlots, -1);
  std::vector<int> comm(edge_off[num_edges] * kNumCommSlots, -1);
  auto at = [&](int slot, int stage, int mb) -> int& {
    return compute[(stage_off[stage] + mb) * kNumComputeSlots + slot];
  };
  auto at_edge = [&](int slot, int e, int msg) -> int& { return comm[(edge_off[e] + msg) * kNumCommSlots + slot]; };
  // The message of producer microbatch j to consumer microbatch k on edge e
  // (-1 when a many-to-many edge has no such pair).
  auto message = [&](int e, int j, int k) {
    if (edges[e].producers.empty()) return j;
    auto it = pair_of[e].find({j, k});
    return it == pair_of[e].end() ? -1 : it->second;
  };
  auto describe = [&](int r, int i) { return fmt::format("rank {} action {} ({})", r, i, ActionName(s.ranks[r][i])); };
  // The edge a send or receive travels on, and its producer microbatch.
  auto edge_of = [&](int r, int i, const Action& a) -> int {
    const bool act = a.payload == Payload::kActivation;
    const int other = a.peer_stage >= 0 ? a.peer_stage : (act ? a.stage + 1 : a.stage - 1);
    auto it = edge_index.find(act ? std::pair{a.stage, other} : std::pair{other, a.stage});
    if (it == edge_index.end()) {
      throw Error(fmt::format("{}: no edge between stages {} and {}", describe(r, i), a.stage, other));
    }
    if (a.microbatch < 0 || a.microbatch >= s.microbatches_of(edges[it->second].from)) {
      throw Error(fmt::format("{}: microbatch out of range (stage {} has {})", describe(r, i), edges[it->second].from,
                              s.microbatches_of(edges[it->second].from)));
    }
    return it->second;
  };
  // Per stage: its last backward (a stage's computes are all on its rank).
  g.last_backward.assign(stages, -1);
  for (int r = 0; r < s.num_ranks; ++r) {
    int prev_compute = -1, prev_comm = -1, prev_sync = -1;
    for (int i = 0; i < static_cast<int>(s.ranks[r].size()); ++i) {
      const Action& a = s.ranks[r][i];
      int id = g.offset[r] + i;
      g.rank[id] = r;
      // Gradient collectives queue on a stream of their own (sync_stream), as
      // Megatron-LM's overlapped gradient reduce runs on the data-parallel
      // communicator beside the pipeline's sends: not behind a stage's last
      // input-gradient send, which waits for the whole backward.
      int& prev = a.kind == ActionKind::kCollective && sync_stream ? prev_sync
                  : a.on_comm_stream()                             ? prev_comm
                                                                   : prev_compute;
      g.stream_prev[id] = prev;
      prev = id;
      int* cell = nullptr;
      if (a.is_compute()) {
        if (a.stage < 0 || a.stage >= stages || a.microbatch < 0 || a.microbatch >= s.microbatches_of(a.stage)) {
          throw Error(fmt::format("{}: stage or microbatch out of range ({} stages; this stage has {} microbatches)",
                                  describe(r, i), stages,
                                  a.stage >= 0 && a.stage < stages ? s.microbatches_of(a.stage) : 0));
        }
        if (s.stage_rank[a.stage] != r) {
          throw Error(fmt::format("{}: stage {} belongs to rank {}", describe(r, i), a.stage, s.stage_rank[a.stage]));
        }
        cell = &at(ComputeSlotOf(a.kind), a.stage, a.microbatch);
      } else if (a.kind == ActionKind::kSend || a.kind == ActionKind::kRecv) {
        if (a.stage < 0 || a.stage >= stages) {
          throw Error(fmt::format("{}: stage out of range ({} stages)", describe(r, i), stages));
        }
        const bool act = a.payload == Payload::kActivation;
        const int slot = a.kind == ActionKind::kSend ? (act ? kSendAct : kSendGrad) : (act ? kRecvAct : kRecvGrad);
        const int e = edge_of(r, i, a);
        const int msg = message(e, a.microbatch, a.peer_microbatch);
        if (msg < 0) {
          throw Error(fmt::format("{}: producer microbatch {} does not feed consumer microbatch {} on edge {} -> {}",
                                  describe(r, i), a.microbatch, a.peer_microbatch, edges[e].from, edges[e].to));
        }
        cell = &at_edge(slot, e, msg);
      } else {
        continue;
      }
      if (*cell >= 0) {
        throw Error(fmt::format("{}: duplicate of rank {} action {}", describe(r, i), g.rank[*cell],
                                *cell - g.offset[g.rank[*cell]]));
      }
      *cell = id;
      if (a.kind == ActionKind::kBackward || a.kind == ActionKind::kBackwardWeight) {
        g.last_backward[a.stage] = id;
      }
    }
  }

  // Barriers between ranks, grouped by the waiting action.
  std::map<int, std::vector<int>> extra;
  for (const ExtraDep& d : s.extra_deps) {
    auto valid = [&](int r, int i) {
      return r >= 0 && r < s.num_ranks && i >= 0 && i < static_cast<int>(s.ranks[r].size());
    };
    if (!valid(d.rank, d.index) || !valid(d.after_rank, d.after_index)) {
      throw Error(fmt::format("schedule {}: barrier rank {} action {} after rank {} action {} names no action", s.name,
                              d.rank, d.index, d.after_rank, d.after_index));
    }
    extra[g.offset[d.rank] + d.index].push_back(g.offset[d.after_rank] + d.after_index);
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
      auto backward_of = [&](int stage, int mb) {
        return at(kB, stage, mb) >= 0 ? at(kB, stage, mb) : at(kBd, stage, mb);
      };
      const int v = a.stage, mb = a.microbatch;
      switch (a.kind) {
        case ActionKind::kForward:
          for (int e : in[v]) {
            const int u = edges[e].from;
            for (int j : Producers(edges[e], mb)) {
              const bool local = s.stage_rank[u] == r;
              need(local ? at(kF, u, j) : at_edge(kRecvAct, e, message(e, j, mb)),
                   local ? "forward of the producing stage" : "receive of its input activation");
            }
          }
          break;
        case ActionKind::kBackward:
        case ActionKind::kBackwardData:
          need(at(kF, v, mb), "forward of the same microbatch");
          for (int e : out[v]) {
            const int w = edges[e].to;
            const bool local = s.stage_rank[w] == r;
            for (int k : Consumers(edges[e], mb, s.microbatches_of(w))) {
              need(local ? backward_of(w, k) : at_edge(kRecvGrad, e, message(e, mb, k)),
                   local ? "backward of the consuming stage" : "receive of its output gradient");
            }
          }
          break;
        case ActionKind::kBackwardWeight:
          need(at(kBd, v, mb), "backward-data of the same microbatch");
          break;
        case ActionKind::kSend: {
          const int e = edge_of(r, i, a);
          if (a.payload == Payload::kActivation) {
            need(at(kF, v, mb), "forward producing the activation");
          } else {
            need(backward_of(v, edges[e].producers.empty() ? ConsumerOf(edges[e], mb) : a.peer_microbatch),
                 "backward producing the gradient");
          }
          break;
        }
        case ActionKind::kRecv: {
          const int e = edge_of(r, i, a);
          need(at_edge(a.payload == Payload::kActivation ? kSendAct : kSendGrad, e, message(e, mb, a.peer_microbatch)),
               "matching send");
          break;
        }
        case ActionKind::kCollective: {
          int buckets = 0;
          for (const Action& b : s.ranks[r]) {
            buckets += b.kind == ActionKind::kCollective && b.stage == v;
          }
          need(v >= 0 && v < stages && s.stage_rank[v] == r ? g.last_backward[v] : -1, "backward of the stage",
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
      if (auto it = extra.find(g.offset[r] + i); it != extra.end()) {
        for (int p : it->second) need(p, "barrier");
      }
      g.dep_begin.push_back(static_cast<int>(g.dep_id.size()));
    }
  }
  return g;
}

ActionOrder TopologicalOrder(const DependencyGraph& g) {
  const int n = g.size();
  ActionOrder out;
  std::vector<int> missing(n, 0);
  out.users_begin.assign(n + 1, 0);
  for (int id = 0; id < n; ++id) {
    if (g.stream_prev[id] >= 0) ++out.users_begin[g.stream_prev[id] + 1];
    for (int d = g.dep_begin[id]; d < g.dep_begin[id + 1]; ++d) ++out.users_begin[g.dep_id[d] + 1];
  }
  for (int id = 0; id < n; ++id) out.users_begin[id + 1] += out.users_begin[id];
  out.users.assign(out.users_begin[n], 0);
  std::vector<int> fill(out.users_begin.begin(), out.users_begin.end() - 1);
  for (int id = 0; id < n; ++id) {
    if (g.stream_prev[id] >= 0) {
      out.users[fill[g.stream_prev[id]]++] = id;
      ++missing[id];
    }
    for (int d = g.dep_begin[id]; d < g.dep_begin[id + 1]; ++d) {
      out.users[fill[g.dep_id[d]]++] = id;
      ++missing[id];
    }
  }
  out.order.reserve(n);
  for (int id = 0; id < n; ++id) {
    if (missing[id] == 0) out.order.push_back(id);
  }
  for (size_t head = 0; head < out.order.size(); ++head) {
    const int id = out.order[head];
    for (int k = out.users_begin[id]; k < out.users_begin[id + 1]; ++k) {
      if (--missing[out.users[k]] == 0) out.order.push_back(out.users[k]);
    }
  }
  return out;
}

}  // namespace loom
