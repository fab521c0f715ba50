#include "loom/sim/simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <queue>
#include <set>

#include "loom/error.h"
#include "loom/pipeline/validate.h"

namespace loom {

void SimOptions::Validate() const {
  if (grad_buckets < 1) {
    throw Error(fmt::format("grad_buckets: must be >= 1, got {}", grad_buckets));
  }
}

double SimResult::max_peak_mem_bytes() const {
  double m = 0;
  for (double p : peak_mem_bytes) m = std::max(m, p);
  return m;
}

std::vector<MemoryPoint> SumMemoryCurves(const std::vector<const std::vector<MemoryPoint>*>& curves) {
  std::vector<std::pair<double, double>> deltas;
  for (const auto* c : curves) {
    double prev = 0;
    for (const auto& p : *c) {
      deltas.push_back({p.time_s, p.bytes - prev});
      prev = p.bytes;
    }
  }
  std::sort(deltas.begin(), deltas.end());
  std::vector<MemoryPoint> out;
  double live = 0;
  for (auto [t, d] : deltas) {
    live += d;
    if (!out.empty() && out.back().time_s == t) {
      out.back().bytes = live;
    } else {
      out.push_back({t, live});
    }
  }
  return out;
}

Simulator::Simulator(Schedule schedule, std::vector<PipelineCosts> replicas, SimOptions options)
    : schedule_(std::move(schedule)), options_(options), replicas_(std::move(replicas)) {
  options_.Validate();
  if (replicas_.empty()) {
    throw Error("simulator: no replica to simulate");
  }
  bool has_sync = false, has_step = false;
  for (const auto& r : schedule_.ranks) {
    for (const auto& a : r) {
      has_sync = has_sync || a.kind == ActionKind::kCollective;
      has_step = has_step || a.kind == ActionKind::kOptimizerStep;
    }
  }
  if (!has_sync) {
    AddGradientSync(schedule_, options_.grad_buckets);
  }
  if (!has_step && options_.optimizer_step) {
    AddOptimizerStep(schedule_);
  }
  if (static_cast<int>(schedule_.ranks.size()) != schedule_.num_ranks) ValidateSchedule(schedule_);  // says why
  // Built once: validation walks the same graph (missing producers and duplicates throw here).
  graph_ = BuildDependencies(schedule_, options_.overlap_grad_sync, options_.sync_stream);
  {
    ActionOrder order = ValidateSchedule(schedule_, graph_);  // a topological order (any gives the same times)
    topo_order_ = std::move(order.order);
    users_begin_ = std::move(order.users_begin);
    users_ = std::move(order.users);
  }
  for (size_t size : {schedule_.sync_with.size(), schedule_.sync_set.size()}) {
    if (size != 0 && static_cast<int>(size) != schedule_.num_stages()) {
      throw Error(fmt::format("simulator: sync_with or sync_set covers {} stages; the schedule has {}", size,
                              schedule_.num_stages()));
    }
  }
  CheckCosts();
  const int n = graph_.size();
  ops_.resize(n);
  for (int id = 0; id < n; ++id) {
    const Action& a = schedule_.ranks[graph_.rank[id]][id - graph_.offset[graph_.rank[id]]];
    // A gradient sent by stage v is the gradient of its producer's output.
    const int producer = a.kind != ActionKind::kSend || a.payload == Payload::kActivation
                             ? a.stage
                             : (a.peer_stage >= 0 ? a.peer_stage : a.stage - 1);
    ops_[id] = {a.kind, producer, a.microbatch, graph_.rank[id]};
    if (a.kind == ActionKind::kCollective) collective_ids_.push_back(id);
    if (a.kind == ActionKind::kWait) wait_ids_.push_back(id);
    if (a.kind == ActionKind::kOptimizerStep) optimizer_ids_.push_back(id);
    if (a.kind == ActionKind::kCollective) {
      if (buckets_.empty()) buckets_.assign(schedule_.num_stages(), 0);
      ++buckets_[a.stage];
    }
  }
  // Collectives of stages in one sync set with one bucket are one all-reduce;
  // all-reduces are ordered (Kahn, first id first) after those holding their
  // members' stream predecessors.
  {
    const auto& set = schedule_.sync_set;
    std::map<std::pair<int, int>, int> index;  // (sync set, bucket) -> all-reduce
    std::vector<int> of(n, -1);                // collective id -> all-reduce
    std::vector<std::vector<int>> groups;
    for (int id : collective_ids_) {
      const Action& a = schedule_.ranks[graph_.rank[id]][id - graph_.offset[graph_.rank[id]]];
      const int s = set.empty() ? -1 : set[a.stage];
      int g = static_cast<int>(groups.size());
      if (s >= 0) g = index.emplace(std::make_pair(s, a.bucket), g).first->second;
      if (g == static_cast<int>(groups.size())) groups.emplace_back();
      groups[g].push_back(id);
      of[id] = g;
    }
    std::vector<std::vector<int>> after(groups.size());
    std::vector<int> waiting(groups.size(), 0);
    for (size_t g = 0; g < groups.size(); ++g) {
      std::set<int> before;
      for (int id : groups[g]) {
        const int prev = graph_.stream_prev[id];
        if (prev >= 0 && of[prev] >= 0 && of[prev] != static_cast<int>(g)) before.insert(of[prev]);
      }
      for (int b : before) after[b].push_back(static_cast<int>(g));
      waiting[g] = static_cast<int>(before.size());
    }
    std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
    for (size_t g = 0; g < groups.size(); ++g) {
      if (waiting[g] == 0) ready.push(static_cast<int>(g));
    }
    while (!ready.empty()) {
      const int g = ready.top();
      ready.pop();
      all_reduces_.push_back(groups[g]);
      for (int h : after[g]) {
        if (--waiting[h] == 0) ready.push(h);
      }
    }
    if (all_reduces_.size() != groups.size()) {
      throw Error("simulator: the ranks order the gradient buckets of their sync sets differently (a cycle)");
    }
  }
  // On a many-to-many edge a producer microbatch's output is split among the
  // consumers it feeds; each message carries an equal share (the compiler does
  // not say which samples go where in bytes). A broker edge carries its
  // StageEdge::share of it (the consuming replica's part of the producer's
  // samples, MMScale's scatter).
  send_share_.assign(n, 1.0);
  const auto edges = schedule_.StageEdges();
  std::map<std::pair<int, int>, int> many_to_many;        // (from, to) -> edge
  std::map<std::pair<int, int>, double> scattered;        // (from, to) -> share < 1
  std::vector<std::vector<int>> consumers(edges.size());  // per such edge and producer microbatch
  for (int e = 0; e < static_cast<int>(edges.size()); ++e) {
    if (!(edges[e].share > 0 && edges[e].share <= 1)) {
      throw Error(fmt::format("simulator: edge {} -> {} carries a share of {}; it must be in (0, 1]", edges[e].from,
                              edges[e].to, edges[e].share));
    }
    if (edges[e].share < 1) scattered[{edges[e].from, edges[e].to}] = edges[e].share;
    if (edges[e].producers.empty()) continue;
    many_to_many[{edges[e].from, edges[e].to}] = e;
    consumers[e].assign(schedule_.microbatches_of(edges[e].from), 0);
    for (const auto& list : edges[e].producers) {
      for (int j : list) ++consumers[e][j];
    }
  }
  for (int id = 0; id < n && !(many_to_many.empty() && scattered.empty()); ++id) {
    const Action& a = schedule_.ranks[graph_.rank[id]][id - graph_.offset[graph_.rank[id]]];
    if (a.kind != ActionKind::kSend || a.peer_stage < 0) continue;
    const bool act = a.payload == Payload::kActivation;
    const std::pair<int, int> key{act ? a.stage : a.peer_stage, act ? a.peer_stage : a.stage};
    if (auto sc = scattered.find(key); sc != scattered.end()) send_share_[id] = sc->second;
    if (a.peer_microbatch < 0) continue;
    const auto e = many_to_many.find(key);
    if (e != many_to_many.end()) send_share_[id] *= 1.0 / static_cast<double>(consumers[e->second][a.microbatch]);
  }
  if (options_.record_timelines) {  // what SetCost, SwapMicrobatches and Resimulate walk
    int max_mb = schedule_.num_microbatches;
    for (int v = 0; v < schedule_.num_stages(); ++v) max_mb = std::max(max_mb, schedule_.microbatches_of(v));
    actions_of_mb_.assign(max_mb, {});
    for (int id = 0; id < n; ++id) {
      int mb = schedule_.ranks[graph_.rank[id]][id - graph_.offset[graph_.rank[id]]].microbatch;
      if (mb >= 0) actions_of_mb_[mb].push_back(id);
    }
    forced_.assign(n, 0);
    queued_.assign(n, 0);
    topo_index_.assign(n, 0);
    for (int i = 0; i < n; ++i) topo_index_[topo_order_[i]] = i;
  }
  // The join set, and the replica pass without it.
  join_index_.assign(n, -1);
  for (const auto* ids : {&collective_ids_, &wait_ids_, &optimizer_ids_}) {
    for (int id : *ids) join_index_[id] = 0;
  }
  for (int id = 0; id < n; ++id) {
    if (join_index_[id] < 0) continue;
    join_index_[id] = static_cast<int>(join_ids_.size());
    join_ids_.push_back(id);
  }
  for (int id : topo_order_) {
    if (join_index_[id] >= 0) continue;
    replica_order_.push_back(id);
    const bool after_join =
        (graph_.stream_prev[id] >= 0 && join_index_[graph_.stream_prev[id]] >= 0) ||
        std::any_of(graph_.dep_id.begin() + graph_.dep_begin[id], graph_.dep_id.begin() + graph_.dep_begin[id + 1],
                    [&](int d) { return join_index_[d] >= 0; });
    if (after_join) {
      throw Error(
          fmt::format("simulator: action {} of rank {} waits on a gradient collective, wait or optimizer "
                      "step; only those may follow them",
                      id - graph_.offset[graph_.rank[id]], graph_.rank[id]));
    }
  }
  for (int r = 0; r < schedule_.num_ranks; ++r) {
    const int last = graph_.offset[r + 1] - 1;
    last_action_.push_back(last >= graph_.offset[r] ? last : -1);
  }
  shares_gpus_.assign(schedule_.num_ranks, 0);
  shared_curves_.assign(schedule_.num_ranks, {});
  for (size_t g = 0; g < options_.memory_groups.size(); ++g) {
    for (int r : options_.memory_groups[g]) {
      if (r < 0 || r >= schedule_.num_ranks) {
        throw Error(fmt::format("simulator: memory group {} names rank {}; the schedule has ranks 0..{}", g, r,
                                schedule_.num_ranks - 1));
      }
      shares_gpus_[r] = shares_gpus_[r] || options_.memory_groups[g].size() > 1;
    }
  }
  AllocateTimes();
  SimulateFromScratch();
}

void Simulator::CheckCosts() const {
  if (replicas_.empty()) throw Error("simulator: no replica to simulate");
  for (const auto& rep : replicas_) {
    if (static_cast<int>(rep.stage.size()) != schedule_.num_stages() ||
        static_cast<int>(rep.static_bytes.size()) != schedule_.num_ranks ||
        static_cast<int>(rep.grad_sync_s.size()) != schedule_.num_stages() ||
        (!rep.optimizer_s.empty() && static_cast<int>(rep.optimizer_s.size()) != schedule_.num_ranks)) {
      throw Error(fmt::format("simulator: costs cover {} stages and {} ranks; the schedule has {} and {}",
                              rep.stage.size(), rep.static_bytes.size(), schedule_.num_stages(), schedule_.num_ranks));
    }
    for (int v = 0; v < schedule_.num_stages(); ++v) {
      if (static_cast<int>(rep.stage[v].size()) != schedule_.microbatches_of(v)) {
        throw Error(fmt::format("simulator: costs of stage {} have {} microbatches; the schedule has {}", v,
                                rep.stage[v].size(), schedule_.microbatches_of(v)));
      }
    }
  }
}

void Simulator::Rerun(std::vector<PipelineCosts> replicas) {
  replicas_ = std::move(replicas);
  CheckCosts();
  AllocateTimes();
  SimulateFromScratch();
}

void Simulator::AllocateTimes() {
  const int n = graph_.size();
  const size_t reps = replicas_.size(), joins = join_ids_.size();
  local_ready_.assign(reps, std::vector<double>(joins, 0.0));
  join_start_.assign(reps, std::vector<double>(joins, 0.0));
  join_end_.assign(reps, std::vector<double>(joins, 0.0));
  last_end_.assign(reps, std::vector<double>(schedule_.num_ranks, 0.0));
  backward_end_.assign(reps, std::vector<double>(schedule_.num_stages(), 0.0));
  const size_t timelines = options_.record_timelines ? reps : 1;  // else one replica's scratch
  start_.assign(timelines, std::vector<double>(n, 0.0));
  end_.assign(timelines, std::vector<double>(n, 0.0));
  dirty_.assign(reps, {});
}

double Simulator::Duration(int rep, int id) const {
  const Op& a = ops_[id];
  const PipelineCosts& c = replicas_[rep];
  switch (a.kind) {
    case ActionKind::kForward:
      return c.at(a.cost_stage, a.microbatch).forward_s;
    case ActionKind::kBackward:
      return c.at(a.cost_stage, a.microbatch).backward_data_s + c.at(a.cost_stage, a.microbatch).backward_weight_s;
    case ActionKind::kBackwardData:
      return c.at(a.cost_stage, a.microbatch).backward_data_s;
    case ActionKind::kBackwardWeight:
      return c.at(a.cost_stage, a.microbatch).backward_weight_s;
    case ActionKind::kSend:
      return c.p2p.latency_s + send_share_[id] * c.at(a.cost_stage, a.microbatch).send_bytes / c.p2p.bytes_per_s;
    case ActionKind::kCollective:
      return c.grad_sync_s[a.cost_stage] / buckets_[a.cost_stage];
    case ActionKind::kOptimizerStep:
      return c.optimizer_s.empty() || !options_.optimizer_step ? 0.0 : c.optimizer_s[a.rank];
    case ActionKind::kRecv:
    case ActionKind::kWait:
      return 0;
  }
  return 0;
}

double Simulator::ReadyTime(const double* start, const double* end, int id) const {
  double t = graph_.stream_prev[id] >= 0 ? end[graph_.stream_prev[id]] : 0.0;
  for (int d = graph_.dep_begin[id]; d < graph_.dep_begin[id + 1]; ++d) {
    const int p = graph_.dep_id[d];
    const double f = graph_.dep_fraction[d];
    t = std::max(t, f >= 1.0 ? end[p] : start[p] + f * (end[p] - start[p]));
  }
  return t;
}

double Simulator::JoinReadyTime(int rep, int id) const {
  // The part outside the join set was folded into local_ready_ by the replica pass.
  const auto& s = join_start_[rep];
  const auto& e = join_end_[rep];
  double t = local_ready_[rep][join_index_[id]];
  const int prev = graph_.stream_prev[id];
  if (prev >= 0 && join_index_[prev] >= 0) t = std::max(t, e[join_index_[prev]]);
  for (int d = graph_.dep_begin[id]; d < graph_.dep_begin[id + 1]; ++d) {
    const int k = join_index_[graph_.dep_id[d]];
    if (k < 0) continue;
    const double f = graph_.dep_fraction[d];
    t = std::max(t, f >= 1.0 ? e[k] : s[k] + f * (e[k] - s[k]));
  }
  return t;
}

void Simulator::RunReplica(int rep, double* start, double* end) {
  // An action starts when its stream predecessor and its dependencies have
  // ended (ReadyTime), so one pass in topological order times every action as
  // an event queue would. The join set is timed across replicas afterwards.
  for (int id : replica_order_) {
    start[id] = ReadyTime(start, end, id);
    end[id] = start[id] + Duration(rep, id);
  }
  CollectReplica(rep, start, end);
}

void Simulator::CollectReplica(int rep, const double* start, const double* end) {
  // What the join and the iteration time read of this replica's pass.
  for (size_t k = 0; k < join_ids_.size(); ++k) {
    const int id = join_ids_[k];
    double t = 0;
    const int prev = graph_.stream_prev[id];
    if (prev >= 0 && join_index_[prev] < 0) t = end[prev];
    for (int d = graph_.dep_begin[id]; d < graph_.dep_begin[id + 1]; ++d) {
      const int p = graph_.dep_id[d];
      if (join_index_[p] >= 0) continue;
      const double f = graph_.dep_fraction[d];
      t = std::max(t, f >= 1.0 ? end[p] : start[p] + f * (end[p] - start[p]));
    }
    local_ready_[rep][k] = t;
  }
  for (int r = 0; r < schedule_.num_ranks; ++r) {
    if (last_action_[r] >= 0 && join_index_[last_action_[r]] < 0) last_end_[rep][r] = end[last_action_[r]];
  }
  for (int v = 0; v < schedule_.num_stages(); ++v) {
    if (graph_.last_backward[v] >= 0) backward_end_[rep][v] = end[graph_.last_backward[v]];
  }
}

void Simulator::JoinGradientSync() {
  // Replicas meet at the data-parallel all-reduce: a bucket starts when every
  // replica has it ready and the previous bucket on that rank is done.
  // Pipelines of one template meet the same way over their sync sets; stages
  // cut differently wait for every stage holding one of their layers.
  const auto& sync_with = schedule_.sync_with;
  const int reps = static_cast<int>(replicas_.size());
  for (const std::vector<int>& ids : all_reduces_) {  // each after its members' stream predecessors
    double t = 0;
    for (int id : ids) {
      const int v = ops_[id].cost_stage;
      for (int rep = 0; rep < reps; ++rep) {
        t = std::max(t, JoinReadyTime(rep, id));
        if (!sync_with.empty()) {
          for (int u : sync_with[v]) t = std::max(t, backward_end_[rep][u]);
        }
      }
    }
    for (int id : ids) {
      const int k = join_index_[id];
      for (int rep = 0; rep < reps; ++rep) {
        join_start_[rep][k] = t;
        join_end_[rep][k] = t + Duration(rep, id);
      }
    }
  }
  for (int id : wait_ids_) {
    const int k = join_index_[id];
    for (int rep = 0; rep < reps; ++rep) join_start_[rep][k] = join_end_[rep][k] = JoinReadyTime(rep, id);
  }
  for (int id : optimizer_ids_) {  // each follows its rank's wait
    const int k = join_index_[id];
    for (int rep = 0; rep < reps; ++rep) {
      join_start_[rep][k] = JoinReadyTime(rep, id);
      join_end_[rep][k] = join_start_[rep][k] + Duration(rep, id);
    }
  }
  if (!options_.record_timelines) return;
  for (int rep = 0; rep < reps; ++rep) {
    for (size_t k = 0; k < join_ids_.size(); ++k) {
      start_[rep][join_ids_[k]] = join_start_[rep][k];
      end_[rep][join_ids_[k]] = join_end_[rep][k];
    }
  }
}

void Simulator::Summarize() {
  iteration_time_s_ = 0;
  for (size_t rep = 0; rep < replicas_.size(); ++rep) {
    for (int r = 0; r < schedule_.num_ranks; ++r) {
      const int last = last_action_[r];
      if (last < 0) continue;
      const int k = join_index_[last];
      iteration_time_s_ = std::max(iteration_time_s_, k >= 0 ? join_end_[rep][k] : last_end_[rep][r]);
    }
    for (int id : collective_ids_) iteration_time_s_ = std::max(iteration_time_s_, join_end_[rep][join_index_[id]]);
  }
  memory_stale_ = true;
}

void Simulator::SimulateFromScratch() {
  const int reps = static_cast<int>(replicas_.size());
  if (!options_.record_timelines) {
    // One replica's times at a time: each is summarized (busy time, memory)
    // as soon as it is timed; only the join set's times are kept per replica.
    StartSummary();
    for (int rep = 0; rep < reps; ++rep) {
      RunReplica(rep, start_[0].data(), end_[0].data());
      SummarizeReplica(rep, start_[0].data(), end_[0].data(), nullptr);
      dirty_[rep].clear();
    }
    JoinGradientSync();
    Summarize();
    FinishSummary();
    return;
  }
  for (int rep = 0; rep < reps; ++rep) {
    RunReplica(rep, start_[rep].data(), end_[rep].data());
    dirty_[rep].clear();
  }
  JoinGradientSync();
  Summarize();
}

void Simulator::SetCost(int rep, int stage, int mb, const StageCost& cost) {
  RequireTimelines("SetCost");
  replicas_.at(rep).stage.at(stage).at(mb) = cost;
  // The stage's own actions, and the gradient sends towards it (they carry its output size).
  for (int id : actions_of_mb_.at(mb)) {
    const Action& a = schedule_.ranks[graph_.rank[id]][id - graph_.offset[graph_.rank[id]]];
    const bool grad_to_stage = a.kind == ActionKind::kSend && a.payload == Payload::kGradient &&
                               (a.peer_stage >= 0 ? a.peer_stage : a.stage - 1) == stage;
    if (a.stage == stage || grad_to_stage) dirty_[rep].push_back(id);
  }
}

void Simulator::SwapMicrobatches(int rep, int a, int b) {
  RequireTimelines("SwapMicrobatches");
  for (auto& st : replicas_.at(rep).stage) {
    if (a < static_cast<int>(st.size()) && b < static_cast<int>(st.size())) std::swap(st[a], st[b]);
  }
  for (int mb : {a, b}) {
    dirty_[rep].insert(dirty_[rep].end(), actions_of_mb_[mb].begin(), actions_of_mb_[mb].end());
  }
}

void Simulator::RequireTimelines(const char* what) const {
  if (!options_.record_timelines) {
    throw Error(fmt::format("simulator: {} needs every replica's timeline (SimOptions::record_timelines)", what));
  }
}

void Simulator::Resimulate() {
  RequireTimelines("Resimulate");
  for (size_t rep = 0; rep < replicas_.size(); ++rep) {
    if (dirty_[rep].empty()) continue;
    double* start = start_[rep].data();
    double* end = end_[rep].data();
    // Walk forward in topological order from the changed actions; an action
    // whose times do not move stops the walk unless its own cost changed.
    // The join set is timed by the join.
    std::priority_queue<int, std::vector<int>, std::greater<int>> work;  // topo index
    std::vector<int> touched;                                            // to clear the scratch flags afterwards
    for (int id : dirty_[rep]) {
      forced_[id] = 1;
      if (!queued_[id]) {
        queued_[id] = 1;
        touched.push_back(id);
        work.push(topo_index_[id]);
      }
    }
    while (!work.empty()) {
      int id = topo_order_[work.top()];
      work.pop();
      if (join_index_[id] >= 0) continue;
      const double s = ReadyTime(start, end, id);
      const double e = s + Duration(static_cast<int>(rep), id);
      if (!forced_[id] && s == start[id] && e == end[id]) continue;
      start[id] = s;
      end[id] = e;
      for (int k = users_begin_[id]; k < users_begin_[id + 1]; ++k) {
        const int u = users_[k];
        if (!queued_[u]) {
          queued_[u] = 1;
          touched.push_back(u);
          work.push(topo_index_[u]);
        }
      }
    }
    for (int id : touched) forced_[id] = queued_[id] = 0;
    dirty_[rep].clear();
    CollectReplica(static_cast<int>(rep), start, end);
  }
  JoinGradientSync();
  Summarize();
}

double Simulator::start_s(int rep, int rank, int index) const {
  RequireTimelines("start_s");
  return start_[rep][graph_.id(rank, index)];
}
double Simulator::end_s(int rep, int rank, int index) const {
  RequireTimelines("end_s");
  return end_[rep][graph_.id(rank, index)];
}

double Simulator::RankMemory(int rep, int r, const double* start, const double* end, double* busy_s,
                             std::vector<MemoryPoint>* curve) {
  // Activations live from a forward's start to the end of its backward.
  // Under a split backward B frees them but keeps what the deferred weight
  // gradients need (weight_grad_hold_bytes) until W ends.
  const PipelineCosts& c = replicas_[rep];
  deltas_.clear();
  double busy = 0;
  for (int id = graph_.offset[r]; id < graph_.offset[r + 1]; ++id) {
    const Op& a = ops_[id];
    if (!IsCompute(a.kind)) continue;
    const double s = start[id], e = end[id];
    const StageCost& sc = c.at(a.cost_stage, a.microbatch);
    // Waits on unhidden communication inside the op are idle, not busy.
    const double wait_s = a.kind == ActionKind::kForward        ? sc.forward_wait_s
                          : a.kind == ActionKind::kBackwardData ? 0.0
                                                                : sc.backward_wait_s;
    busy += std::max(0.0, e - s - wait_s);
    if (a.kind == ActionKind::kForward) deltas_.push_back({s, sc.activation_bytes});
    if (a.kind == ActionKind::kBackward || a.kind == ActionKind::kBackwardData) {
      const double extra = a.kind == ActionKind::kBackward ? sc.transient_bytes : sc.split_backward_transient_bytes;
      deltas_.push_back({s, extra});
      deltas_.push_back({e, -extra});
    }
    if (a.kind == ActionKind::kBackward) deltas_.push_back({e, -sc.activation_bytes});
    if (a.kind == ActionKind::kBackwardData) deltas_.push_back({e, sc.weight_grad_hold_bytes - sc.activation_bytes});
    if (a.kind == ActionKind::kBackwardWeight) deltas_.push_back({e, -sc.weight_grad_hold_bytes});
  }
  *busy_s = busy;
  // ZeRO-2's whole gradients (PipelineCosts::backward_grad_bytes), from each
  // stage's first backward; released at the rank's last action's end.
  if (!c.backward_grad_bytes.empty()) {
    double last_end = 0;
    std::vector<bool> started(c.backward_grad_bytes.size(), false);
    for (int id = graph_.offset[r]; id < graph_.offset[r + 1]; ++id) {
      const Op& a = ops_[id];
      if (!IsCompute(a.kind)) continue;
      last_end = std::max(last_end, end[id]);
      const bool backward = a.kind == ActionKind::kBackward || a.kind == ActionKind::kBackwardData;
      const double held = c.backward_grad_bytes[a.cost_stage];
      if (!backward || held <= 0 || started[a.cost_stage]) continue;
      started[a.cost_stage] = true;
      deltas_.push_back({start[id], held});
    }
    for (size_t v = 0; v < started.size(); ++v) {
      if (started[v]) deltas_.push_back({last_end, -c.backward_grad_bytes[v]});
    }
  }
  // Frees before allocations at the same instant.
  std::sort(deltas_.begin(), deltas_.end());
  double live = c.static_bytes[r], peak = live;
  if (curve != nullptr) curve->push_back({0.0, live});
  for (const auto& [t, d] : deltas_) {
    live += d;
    peak = std::max(peak, live);
    if (curve == nullptr) continue;
    if (!curve->empty() && curve->back().time_s == t) {
      curve->back().bytes = live;
    } else {
      curve->push_back({t, live});
    }
  }
  return peak;
}

void Simulator::StartSummary() {
  const int p = schedule_.num_ranks;
  const int reps = static_cast<int>(replicas_.size());
  const int groups = static_cast<int>(options_.memory_groups.size());
  result_ = SimResult{};
  result_.busy_s.assign(reps * p, 0.0);
  result_.peak_mem_bytes.assign(reps * p, 0.0);
  result_.group_peak_mem_bytes.assign(reps * groups, 0.0);
  result_.events = static_cast<int64_t>(graph_.size()) * reps;
  if (options_.record_timelines) result_.memory.assign(reps * p, {});
}

void Simulator::SummarizeReplica(int rep, const double* start, const double* end,
                                 std::vector<std::vector<MemoryPoint>>* curves) {
  const int p = schedule_.num_ranks;
  // Ranks sharing GPUs add up their curves; others need only their peak.
  auto& own = shared_curves_;  // shared ranks' curves, without recording
  for (int r = 0; r < p; ++r) {
    if (curves == nullptr && shares_gpus_[r]) own[r].clear();
    auto* curve = curves != nullptr ? &(*curves)[rep * p + r] : (shares_gpus_[r] ? &own[r] : nullptr);
    result_.peak_mem_bytes[rep * p + r] = RankMemory(rep, r, start, end, &result_.busy_s[rep * p + r], curve);
  }
  const int groups = static_cast<int>(options_.memory_groups.size());
  for (int g = 0; g < groups; ++g) {
    const auto& ranks = options_.memory_groups[g];
    double peak = 0;
    if (ranks.size() == 1) {
      peak = result_.peak_mem_bytes[rep * p + ranks[0]];
    } else {
      std::vector<const std::vector<MemoryPoint>*> parts;
      for (int r : ranks) parts.push_back(curves != nullptr ? &(*curves)[rep * p + r] : &own[r]);
      for (const auto& pt : SumMemoryCurves(parts)) peak = std::max(peak, pt.bytes);
    }
    result_.group_peak_mem_bytes[rep * groups + g] = peak;
  }
}

void Simulator::FinishSummary() {
  // Optimizer steps are busy too (their times come from the join).
  const int p = schedule_.num_ranks;
  const int reps = static_cast<int>(replicas_.size());
  double busy_total = 0;
  for (int rep = 0; rep < reps; ++rep) {
    for (int id : optimizer_ids_) {
      const int k = join_index_[id];
      result_.busy_s[rep * p + graph_.rank[id]] += join_end_[rep][k] - join_start_[rep][k];
    }
    for (int r = 0; r < p; ++r) busy_total += result_.busy_s[rep * p + r];
  }
  result_.iteration_time_s = iteration_time_s_;
  result_.bubble_ratio =
      iteration_time_s_ > 0 ? 1.0 - busy_total / (static_cast<double>(reps * p) * iteration_time_s_) : 0.0;
  memory_stale_ = false;
}

void Simulator::ComputeMemory() {
  // Every replica's timeline is kept (summaries are made as replicas are timed otherwise).
  const int p = schedule_.num_ranks;
  const int reps = static_cast<int>(replicas_.size());
  StartSummary();
  for (int rep = 0; rep < reps; ++rep) {
    SummarizeReplica(rep, start_[rep].data(), end_[rep].data(), &result_.memory);
    for (int r = 0; r < p; ++r) {
      for (int i = 0; i < static_cast<int>(schedule_.ranks[r].size()); ++i) {
        const Action& a = schedule_.ranks[r][i];
        const int id = graph_.offset[r] + i;
        if (a.is_compute() || a.on_comm_stream() || a.kind == ActionKind::kOptimizerStep) {
          const int stream = a.kind == ActionKind::kCollective ? 2 : a.on_comm_stream() ? 1 : 0;
          result_.intervals.push_back({rep * p + r, stream, i, start_[rep][id], end_[rep][id]});
        }
      }
    }
  }
  FinishSummary();
}

const SimResult& Simulator::result() {
  if (memory_stale_) ComputeMemory();
  return result_;
}

Simulator::Parts Simulator::Release() && {
  if (memory_stale_) ComputeMemory();
  return {std::move(schedule_), std::move(replicas_), std::move(result_)};
}

SimResult Simulate(const Schedule& schedule, const PipelineCosts& costs, const SimOptions& options) {
  Simulator sim(schedule, {costs}, options);
  return sim.result();
}

}  // namespace loom
