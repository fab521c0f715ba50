#include "loom/pipeline/dependency_graph.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <string>

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

// Builds the graph in three passes over one set of slot indexes (flat
// offsets per stage and per edge, the many-to-many message pairs): the stage
// edges are checked and indexed, every send, receive and compute is placed in
// its slot, and then each action's dependencies are read from the slots.
class GraphBuilder {
 public:
  GraphBuilder(const Schedule& s, bool overlap, bool sync_stream)
      : s_(s), overlap_(overlap), sync_stream_(sync_stream), stages_(s.num_stages()), edges_(s.StageEdges()) {}

  DependencyGraph Build() {
    IndexEdges();
    CheckManyToManyFeeds();
    PlaceActions();
    AddDependencies();
    return std::move(g_);
  }

 private:
  void IndexEdges();
  void CheckManyToManyFeeds() const;
  void PlaceActions();
  void AddDependencies();
  void AddDependenciesOf(int r, int i, std::vector<int>& collectives_of_rank,
                         const std::map<int, std::vector<int>>& extra);

  int& At(int slot, int stage, int mb) { return compute_[(stage_off_[stage] + mb) * kNumComputeSlots + slot]; }
  int& AtEdge(int slot, int e, int msg) { return comm_[(edge_off_[e] + msg) * kNumCommSlots + slot]; }
  // The message of producer microbatch j to consumer microbatch k on edge e
  // (-1 when a many-to-many edge has no such pair).
  int Message(int e, int j, int k) const {
    if (edges_[e].producers.empty()) return j;
    auto it = pair_of_[e].find({j, k});
    return it == pair_of_[e].end() ? -1 : it->second;
  }
  int BackwardOf(int stage, int mb) { return At(kB, stage, mb) >= 0 ? At(kB, stage, mb) : At(kBd, stage, mb); }
  std::string Describe(int r, int i) const {
    return fmt::format("rank {} action {} ({})", r, i, ActionName(s_.ranks[r][i]));
  }
  int EdgeOf(int r, int i, const Action& a) const;

  const Schedule& s_;
  const bool overlap_, sync_stream_;
  const int stages_;
  const std::vector<StageEdge> edges_;
  // Set by IndexEdges.
  std::vector<size_t> stage_off_, edge_off_;  // flat slot offsets: compute per stage, messages per edge
  std::vector<std::vector<int>> in_, out_;    // per stage: its incoming and outgoing edges
  std::map<std::pair<int, int>, int> edge_index_;
  std::vector<std::map<std::pair<int, int>, int>> pair_of_;  // many-to-many: (j, k) -> message
  // Set by PlaceActions: the id in each slot, or -1.
  std::vector<int> compute_, comm_;
  DependencyGraph g_;
};

void GraphBuilder::IndexEdges() {
  const int num_edges = static_cast<int>(edges_.size());
  if (!s_.stage_microbatches.empty() && static_cast<int>(s_.stage_microbatches.size()) != stages_) {
    throw Error(
        fmt::format("schedule {}: {} microbatch counts for {} stages", s_.name, s_.stage_microbatches.size(), stages_));
  }
  stage_off_.assign(stages_ + 1, 0);
  edge_off_.assign(num_edges + 1, 0);
  for (int v = 0; v < stages_; ++v) stage_off_[v + 1] = stage_off_[v] + s_.microbatches_of(v);
  in_.assign(stages_, {});
  out_.assign(stages_, {});
  pair_of_.assign(num_edges, {});
  for (int e = 0; e < num_edges; ++e) {
    const StageEdge& se = edges_[e];
    if (se.from < 0 || se.from >= stages_ || se.to < 0 || se.to >= stages_ || se.from == se.to) {
      throw Error(
          fmt::format("schedule {}: edge {} -> {} names a stage outside 0..{}", s_.name, se.from, se.to, stages_ - 1));
    }
    const int mu = s_.microbatches_of(se.from), mv = s_.microbatches_of(se.to);
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
          pair_of_[e].emplace(std::make_pair(j, k), static_cast<int>(pair_of_[e].size()));
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
                      s_.name, se.from, se.to, mu, se.from, mv, se.to));
    }
    edge_off_[e + 1] = edge_off_[e] + (se.producers.empty() ? mu : static_cast<int>(pair_of_[e].size()));
    in_[se.to].push_back(e);
    out_[se.from].push_back(e);
    edge_index_[{se.from, se.to}] = e;
  }
}

// On many-to-many edges a producer microbatch may feed only some consumers'
// edges, but it must feed one: else its backward would get no gradient.
void GraphBuilder::CheckManyToManyFeeds() const {
  for (int v = 0; v < stages_; ++v) {
    const bool explicit_out =
        std::any_of(out_[v].begin(), out_[v].end(), [&](int e) { return !edges_[e].producers.empty(); });
    if (!explicit_out) continue;
    for (int j = 0; j < s_.microbatches_of(v); ++j) {
      bool fed = false;
      for (int e : out_[v]) fed = fed || !Consumers(edges_[e], j, s_.microbatches_of(edges_[e].to)).empty();
      if (!fed) {
        throw Error(fmt::format("schedule {}: microbatch {} of stage {} feeds no consumer on its many-to-many edges",
                                s_.name, j, v));
      }
    }
  }
}

// The edge a send or receive travels on, checking its producer microbatch.
int GraphBuilder::EdgeOf(int r, int i, const Action& a) const {
  const bool act = a.payload == Payload::kActivation;
  const int other = a.peer_stage >= 0 ? a.peer_stage : (act ? a.stage + 1 : a.stage - 1);
  auto it = edge_index_.find(act ? std::pair{a.stage, other} : std::pair{other, a.stage});
  if (it == edge_index_.end()) {
    throw Error(fmt::format("{}: no edge between stages {} and {}", Describe(r, i), a.stage, other));
  }
  if (a.microbatch < 0 || a.microbatch >= s_.microbatches_of(edges_[it->second].from)) {
    throw Error(fmt::format("{}: microbatch out of range (stage {} has {})", Describe(r, i), edges_[it->second].from,
                            s_.microbatches_of(edges_[it->second].from)));
  }
  return it->second;
}

// Flat ids, streams, and each compute, send and receive in its slot (a
// duplicate is an error); per stage its last backward (a stage's computes are
// all on its rank).
void GraphBuilder::PlaceActions() {
  g_.offset.push_back(0);
  for (int r = 0; r < s_.num_ranks; ++r) {
    g_.offset.push_back(g_.offset.back() + static_cast<int>(s_.ranks[r].size()));
  }
  const int n = g_.offset.back();
  g_.rank.resize(n);
  g_.stream_prev.assign(n, -1);
  compute_.assign(stage_off_[stages_] * kNumComputeSlots, -1);
  comm_.assign(edge_off_.back() * kNumCommSlots, -1);
  g_.last_backward.assign(stages_, -1);
  for (int r = 0; r < s_.num_ranks; ++r) {
    int prev_compute = -1, prev_comm = -1, prev_sync = -1;
    for (int i = 0; i < static_cast<int>(s_.ranks[r].size()); ++i) {
      const Action& a = s_.ranks[r][i];
      int id = g_.offset[r] + i;
      g_.rank[id] = r;
      // Gradient collectives queue on a stream of their own (sync_stream), as
      // Megatron-LM's overlapped gradient reduce runs on the data-parallel
      // communicator beside the pipeline's sends: not behind a stage's last
      // input-gradient send, which waits for the whole backward.
      int& prev = a.kind == ActionKind::kCollective && sync_stream_ ? prev_sync
                  : a.on_comm_stream()                              ? prev_comm
                                                                    : prev_compute;
      g_.stream_prev[id] = prev;
      prev = id;
      int* cell = nullptr;
      if (a.is_compute()) {
        if (a.stage < 0 || a.stage >= stages_ || a.microbatch < 0 || a.microbatch >= s_.microbatches_of(a.stage)) {
          throw Error(fmt::format("{}: stage or microbatch out of range ({} stages; this stage has {} microbatches)",
                                  Describe(r, i), stages_,
                                  a.stage >= 0 && a.stage < stages_ ? s_.microbatches_of(a.stage) : 0));
        }
        if (s_.stage_rank[a.stage] != r) {
          throw Error(fmt::format("{}: stage {} belongs to rank {}", Describe(r, i), a.stage, s_.stage_rank[a.stage]));
        }
        cell = &At(ComputeSlotOf(a.kind), a.stage, a.microbatch);
      } else if (a.kind == ActionKind::kSend || a.kind == ActionKind::kRecv) {
        if (a.stage < 0 || a.stage >= stages_) {
          throw Error(fmt::format("{}: stage out of range ({} stages)", Describe(r, i), stages_));
        }
        const bool act = a.payload == Payload::kActivation;
        const int slot = a.kind == ActionKind::kSend ? (act ? kSendAct : kSendGrad) : (act ? kRecvAct : kRecvGrad);
        const int e = EdgeOf(r, i, a);
        const int msg = Message(e, a.microbatch, a.peer_microbatch);
        if (msg < 0) {
          throw Error(fmt::format("{}: producer microbatch {} does not feed consumer microbatch {} on edge {} -> {}",
                                  Describe(r, i), a.microbatch, a.peer_microbatch, edges_[e].from, edges_[e].to));
        }
        cell = &AtEdge(slot, e, msg);
      } else {
        continue;
      }
      if (*cell >= 0) {
        throw Error(fmt::format("{}: duplicate of rank {} action {}", Describe(r, i), g_.rank[*cell],
                                *cell - g_.offset[g_.rank[*cell]]));
      }
      *cell = id;
      if (a.kind == ActionKind::kBackward || a.kind == ActionKind::kBackwardWeight) {
        g_.last_backward[a.stage] = id;
      }
    }
  }
}

void GraphBuilder::AddDependencies() {
  // Barriers between ranks, grouped by the waiting action.
  std::map<int, std::vector<int>> extra;
  for (const ExtraDep& d : s_.extra_deps) {
    auto valid = [&](int r, int i) {
      return r >= 0 && r < s_.num_ranks && i >= 0 && i < static_cast<int>(s_.ranks[r].size());
    };
    if (!valid(d.rank, d.index) || !valid(d.after_rank, d.after_index)) {
      throw Error(fmt::format("schedule {}: barrier rank {} action {} after rank {} action {} names no action", s_.name,
                              d.rank, d.index, d.after_rank, d.after_index));
    }
    extra[g_.offset[d.rank] + d.index].push_back(g_.offset[d.after_rank] + d.after_index);
  }
  g_.dep_begin.push_back(0);
  std::vector<int> collectives_of_rank;
  for (int r = 0; r < s_.num_ranks; ++r) {
    collectives_of_rank.clear();
    for (int i = 0; i < static_cast<int>(s_.ranks[r].size()); ++i) {
      AddDependenciesOf(r, i, collectives_of_rank, extra);
      g_.dep_begin.push_back(static_cast<int>(g_.dep_id.size()));
    }
  }
}

// What rank r's action i waits for, by kind.
void GraphBuilder::AddDependenciesOf(int r, int i, std::vector<int>& collectives_of_rank,
                                     const std::map<int, std::vector<int>>& extra) {
  const Action& a = s_.ranks[r][i];
  auto need = [&](int producer, const char* what, double fraction = 1.0) {
    if (producer < 0) {
      throw Error(fmt::format("{}: no {} to wait for", Describe(r, i), what));
    }
    g_.dep_id.push_back(producer);
    g_.dep_fraction.push_back(fraction);
  };
  const int v = a.stage, mb = a.microbatch;
  switch (a.kind) {
    case ActionKind::kForward:
      for (int e : in_[v]) {
        const int u = edges_[e].from;
        for (int j : Producers(edges_[e], mb)) {
          const bool local = s_.stage_rank[u] == r;
          need(local ? At(kF, u, j) : AtEdge(kRecvAct, e, Message(e, j, mb)),
               local ? "forward of the producing stage" : "receive of its input activation");
        }
      }
      break;
    case ActionKind::kBackward:
    case ActionKind::kBackwardData:
      need(At(kF, v, mb), "forward of the same microbatch");
      for (int e : out_[v]) {
        const int w = edges_[e].to;
        const bool local = s_.stage_rank[w] == r;
        for (int k : Consumers(edges_[e], mb, s_.microbatches_of(w))) {
          need(local ? BackwardOf(w, k) : AtEdge(kRecvGrad, e, Message(e, mb, k)),
               local ? "backward of the consuming stage" : "receive of its output gradient");
        }
      }
      break;
    case ActionKind::kBackwardWeight:
      need(At(kBd, v, mb), "backward-data of the same microbatch");
      break;
    case ActionKind::kSend: {
      const int e = EdgeOf(r, i, a);
      if (a.payload == Payload::kActivation) {
        need(At(kF, v, mb), "forward producing the activation");
      } else {
        need(BackwardOf(v, edges_[e].producers.empty() ? ConsumerOf(edges_[e], mb) : a.peer_microbatch),
             "backward producing the gradient");
      }
      break;
    }
    case ActionKind::kRecv: {
      const int e = EdgeOf(r, i, a);
      need(AtEdge(a.payload == Payload::kActivation ? kSendAct : kSendGrad, e, Message(e, mb, a.peer_microbatch)),
           "matching send");
      break;
    }
    case ActionKind::kCollective: {
      int buckets = 0;
      for (const Action& b : s_.ranks[r]) {
        buckets += b.kind == ActionKind::kCollective && b.stage == v;
      }
      need(v >= 0 && v < stages_ && s_.stage_rank[v] == r ? g_.last_backward[v] : -1, "backward of the stage",
           overlap_ ? static_cast<double>(a.bucket + 1) / buckets : 1.0);
      collectives_of_rank.push_back(g_.offset[r] + i);
      break;
    }
    case ActionKind::kWait:
      for (int c : collectives_of_rank) {
        need(c, "collective");
      }
      break;
  }
  if (auto it = extra.find(g_.offset[r] + i); it != extra.end()) {
    for (int p : it->second) need(p, "barrier");
  }
}

}  // namespace

DependencyGraph BuildDependencies(const Schedule& s, bool overlap, bool sync_stream) {
  return GraphBuilder(s, overlap, sync_stream).Build();
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
