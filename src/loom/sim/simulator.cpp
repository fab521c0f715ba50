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
  graph_ = BuildDependencies(schedule_, options_.overlap_grad_sync);
  ValidateSchedule(schedule_, graph_);
  for (size_t size : {schedule_.sync_with.size(), schedule_.sync_set.size()}) {
    if (size != 0 && static_cast<int>(size) != schedule_.num_stages()) {
      throw Error(fmt::format("simulator: sync_with or sync_set covers {} stages; the schedule has {}", size,
                              schedule_.num_stages()));
    }
  }
  for (const auto& rep : replicas_) {
    if (static_cast<int>(rep.stage.size()) != schedule_.num_stages() ||
        static_cast<int>(rep.static_bytes.size()) != schedule_.num_ranks ||
        static_cast<int>(rep.grad_sync_s.size()) != schedule_.num_stages() ||
        (!rep.optimizer_s.empty() && static_cast<int>(rep.optimizer_s.size()) != schedule_.num_ranks)) {
      throw Error(fmt::format("simulator: costs cover {} stages and {} ranks; the schedule has {} and {}",
                              rep.stage.size(), rep.static_bytes.size(), schedule_.num_stages(),
                              schedule_.num_ranks));
    }
    for (int v = 0; v < schedule_.num_stages(); ++v) {
      if (static_cast<int>(rep.stage[v].size()) != schedule_.microbatches_of(v)) {
        throw Error(fmt::format("simulator: costs of stage {} have {} microbatches; the schedule has {}", v,
                                rep.stage[v].size(), schedule_.microbatches_of(v)));
      }
    }
  }
  const int n = graph_.size();
  users_.assign(n, {});
  std::vector<int> missing(n, 0);
  for (int id = 0; id < n; ++id) {
    if (graph_.stream_prev[id] >= 0) {
      users_[graph_.stream_prev[id]].push_back(id);
      ++missing[id];
    }
    for (int d = graph_.dep_begin[id]; d < graph_.dep_begin[id + 1]; ++d) {
      users_[graph_.dep_id[d]].push_back(id);
      ++missing[id];
    }
    const Action& a = schedule_.ranks[graph_.rank[id]][id - graph_.offset[graph_.rank[id]]];
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
  // not say which samples go where in bytes).
  send_share_.assign(n, 1.0);
  const auto edges = schedule_.StageEdges();
  for (int id = 0; id < n; ++id) {
    const Action& a = schedule_.ranks[graph_.rank[id]][id - graph_.offset[graph_.rank[id]]];
    if (a.kind != ActionKind::kSend || a.peer_microbatch < 0) continue;
    const bool act = a.payload == Payload::kActivation;
    const int from = act ? a.stage : a.peer_stage, to = act ? a.peer_stage : a.stage;
    for (const StageEdge& e : edges) {
      if (e.from == from && e.to == to && !e.producers.empty()) {
        send_share_[id] = 1.0 / static_cast<double>(Consumers(e, a.microbatch, schedule_.microbatches_of(to)).size());
      }
    }
  }
  int max_mb = schedule_.num_microbatches;
  for (int v = 0; v < schedule_.num_stages(); ++v) max_mb = std::max(max_mb, schedule_.microbatches_of(v));
  actions_of_mb_.assign(max_mb, {});
  for (int id = 0; id < n; ++id) {
    int mb = schedule_.ranks[graph_.rank[id]][id - graph_.offset[graph_.rank[id]]].microbatch;
    if (mb >= 0) actions_of_mb_[mb].push_back(id);
  }
  forced_.assign(n, 0);
  queued_.assign(n, 0);
  // A topological order (Kahn, smallest id first: deterministic).
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int id = 0; id < n; ++id) {
    if (missing[id] == 0) ready.push(id);
  }
  topo_index_.assign(n, 0);
  while (!ready.empty()) {
    int id = ready.top();
    ready.pop();
    topo_index_[id] = static_cast<int>(topo_order_.size());
    topo_order_.push_back(id);
    for (int u : users_[id]) {
      if (--missing[u] == 0) ready.push(u);
    }
  }
  start_.assign(replicas_.size(), std::vector<double>(n, 0.0));
  end_.assign(replicas_.size(), std::vector<double>(n, 0.0));
  dirty_.assign(replicas_.size(), {});
  SimulateFromScratch();
}

double Simulator::Duration(int rep, int id) const {
  const int r = graph_.rank[id];
  const Action& a = schedule_.ranks[r][id - graph_.offset[r]];
  const PipelineCosts& c = replicas_[rep];
  switch (a.kind) {
    case ActionKind::kForward: return c.at(a.stage, a.microbatch).forward_s;
    case ActionKind::kBackward:
      return c.at(a.stage, a.microbatch).backward_data_s + c.at(a.stage, a.microbatch).backward_weight_s;
    case ActionKind::kBackwardData: return c.at(a.stage, a.microbatch).backward_data_s;
    case ActionKind::kBackwardWeight: return c.at(a.stage, a.microbatch).backward_weight_s;
    case ActionKind::kSend: {
      // A gradient sent by stage v is the gradient of its producer's output.
      int producer = a.payload == Payload::kActivation ? a.stage : (a.peer_stage >= 0 ? a.peer_stage : a.stage - 1);
      return c.p2p.latency_s + send_share_[id] * c.at(producer, a.microbatch).send_bytes / c.p2p.bytes_per_s;
    }
    case ActionKind::kCollective: return c.grad_sync_s[a.stage] / buckets_[a.stage];
    case ActionKind::kOptimizerStep: return c.optimizer_s.empty() || !options_.optimizer_step ? 0.0 : c.optimizer_s[r];
    case ActionKind::kRecv:
    case ActionKind::kWait: return 0;
  }
  return 0;
}

double Simulator::ReadyTime(int rep, int id) const {
  const auto& s = start_[rep];
  const auto& e = end_[rep];
  double t = graph_.stream_prev[id] >= 0 ? e[graph_.stream_prev[id]] : 0.0;
  for (int d = graph_.dep_begin[id]; d < graph_.dep_begin[id + 1]; ++d) {
    int p = graph_.dep_id[d];
    double f = graph_.dep_fraction[d];
    t = std::max(t, f >= 1.0 ? e[p] : s[p] + f * (e[p] - s[p]));
  }
  return t;
}

void Simulator::RunReplica(int rep) {
  // Event-driven: pop the earliest completion, release the actions waiting on it.
  const int n = graph_.size();
  std::vector<int> missing(n, 0);
  for (int id = 0; id < n; ++id) {
    missing[id] = (graph_.stream_prev[id] >= 0) + (graph_.dep_begin[id + 1] - graph_.dep_begin[id]);
  }
  using Event = std::pair<double, int>;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events;
  auto launch = [&](int id) {
    start_[rep][id] = ReadyTime(rep, id);
    end_[rep][id] = start_[rep][id] + Duration(rep, id);
    events.push({end_[rep][id], id});
  };
  for (int id = 0; id < n; ++id) {
    if (missing[id] == 0) launch(id);
  }
  while (!events.empty()) {
    int id = events.top().second;
    events.pop();
    for (int u : users_[id]) {
      if (--missing[u] == 0) launch(u);
    }
  }
}

void Simulator::JoinGradientSync() {
  // Replicas meet at the data-parallel all-reduce: a bucket starts when every
  // replica has it ready and the previous bucket on that rank is done.
  // Pipelines of one template meet the same way over their sync sets; stages
  // cut differently wait for every stage holding one of their layers.
  const auto& sync_with = schedule_.sync_with;
  for (const std::vector<int>& ids : all_reduces_) {  // each after its members' stream predecessors
    double t = 0;
    for (int id : ids) {
      const int v = schedule_.ranks[graph_.rank[id]][id - graph_.offset[graph_.rank[id]]].stage;
      for (size_t rep = 0; rep < replicas_.size(); ++rep) {
        t = std::max(t, ReadyTime(static_cast<int>(rep), id));
        if (!sync_with.empty()) {
          for (int u : sync_with[v]) t = std::max(t, end_[rep][graph_.last_backward[u]]);
        }
      }
    }
    for (int id : ids) {
      for (size_t rep = 0; rep < replicas_.size(); ++rep) {
        start_[rep][id] = t;
        end_[rep][id] = t + Duration(static_cast<int>(rep), id);
      }
    }
  }
  for (int id : wait_ids_) {
    for (size_t rep = 0; rep < replicas_.size(); ++rep) {
      start_[rep][id] = end_[rep][id] = ReadyTime(static_cast<int>(rep), id);
    }
  }
  for (int id : optimizer_ids_) {  // each follows its rank's wait
    for (size_t rep = 0; rep < replicas_.size(); ++rep) {
      start_[rep][id] = ReadyTime(static_cast<int>(rep), id);
      end_[rep][id] = start_[rep][id] + Duration(static_cast<int>(rep), id);
    }
  }
}

void Simulator::Summarize() {
  const int p = schedule_.num_ranks;
  iteration_time_s_ = 0;
  for (size_t rep = 0; rep < replicas_.size(); ++rep) {
    for (int r = 0; r < p; ++r) {
      int last = graph_.offset[r + 1] - 1;
      if (last >= graph_.offset[r]) iteration_time_s_ = std::max(iteration_time_s_, end_[rep][last]);
    }
    for (int id : collective_ids_) iteration_time_s_ = std::max(iteration_time_s_, end_[rep][id]);
  }
  memory_stale_ = true;
}

void Simulator::SimulateFromScratch() {
  for (size_t rep = 0; rep < replicas_.size(); ++rep) {
    RunReplica(static_cast<int>(rep));
    dirty_[rep].clear();
  }
  JoinGradientSync();
  Summarize();
}

void Simulator::SetCost(int rep, int stage, int mb, const StageCost& cost) {
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
  for (auto& st : replicas_.at(rep).stage) {
    if (a < static_cast<int>(st.size()) && b < static_cast<int>(st.size())) std::swap(st[a], st[b]);
  }
  for (int mb : {a, b}) {
    dirty_[rep].insert(dirty_[rep].end(), actions_of_mb_[mb].begin(), actions_of_mb_[mb].end());
  }
}

void Simulator::Resimulate() {
  for (size_t rep = 0; rep < replicas_.size(); ++rep) {
    if (dirty_[rep].empty()) continue;
    // Walk forward in topological order from the changed actions; an action
    // whose times do not move stops the walk unless its own cost changed.
    std::priority_queue<int, std::vector<int>, std::greater<int>> work;  // topo index
    std::vector<int> touched;  // to clear the scratch flags afterwards
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
      double s = ReadyTime(static_cast<int>(rep), id);
      double e = s + Duration(static_cast<int>(rep), id);
      if (!forced_[id] && s == start_[rep][id] && e == end_[rep][id]) continue;
      start_[rep][id] = s;
      end_[rep][id] = e;
      for (int u : users_[id]) {
        if (!queued_[u]) {
          queued_[u] = 1;
          touched.push_back(u);
          work.push(topo_index_[u]);
        }
      }
    }
    for (int id : touched) forced_[id] = queued_[id] = 0;
    dirty_[rep].clear();
  }
  JoinGradientSync();
  Summarize();
}

double Simulator::start_s(int rep, int rank, int index) const { return start_[rep][graph_.id(rank, index)]; }
double Simulator::end_s(int rep, int rank, int index) const { return end_[rep][graph_.id(rank, index)]; }

void Simulator::ComputeMemory() {
  const int p = schedule_.num_ranks;
  const int reps = static_cast<int>(replicas_.size());
  result_.iteration_time_s = iteration_time_s_;
  result_.busy_s.assign(reps * p, 0.0);
  result_.peak_mem_bytes.assign(reps * p, 0.0);
  result_.memory.assign(reps * p, {});
  result_.intervals.clear();
  result_.events = static_cast<int64_t>(graph_.size()) * reps;
  double busy_total = 0;
  for (int rep = 0; rep < reps; ++rep) {
    const PipelineCosts& c = replicas_[rep];
    for (int r = 0; r < p; ++r) {
      const int out = rep * p + r;
      // Activations live from a forward's start to the end of the last backward
      // piece of the same microbatch (the weight pass under zero-bubble).
      std::vector<std::pair<double, double>> deltas;  // (time, bytes)
      for (int i = 0; i < static_cast<int>(schedule_.ranks[r].size()); ++i) {
        const Action& a = schedule_.ranks[r][i];
        const int id = graph_.offset[r] + i;
        const double s = start_[rep][id], e = end_[rep][id];
        const bool step = a.kind == ActionKind::kOptimizerStep;
        if (options_.record_intervals && (a.is_compute() || a.on_comm_stream() || step)) {
          result_.intervals.push_back({out, a.on_comm_stream() ? 1 : 0, i, s, e});
        }
        if (step) result_.busy_s[out] += e - s;
        if (!a.is_compute()) continue;
        const StageCost& sc = c.at(a.stage, a.microbatch);
        // Waits on unhidden communication inside the op are idle, not busy.
        const double wait_s = a.kind == ActionKind::kForward          ? sc.forward_wait_s
                              : a.kind == ActionKind::kBackwardData ? 0.0
                                                                      : sc.backward_wait_s;
        result_.busy_s[out] += std::max(0.0, e - s - wait_s);
        if (a.kind == ActionKind::kForward) {
          deltas.push_back({s, sc.activation_bytes});
        }
        if (a.kind == ActionKind::kBackward || a.kind == ActionKind::kBackwardData) {
          deltas.push_back({s, sc.transient_bytes});
          deltas.push_back({e, -sc.transient_bytes});
        }
        if (a.kind == ActionKind::kBackward || a.kind == ActionKind::kBackwardWeight) {
          deltas.push_back({e, -sc.activation_bytes});
        }
      }
      // Frees before allocations at the same instant.
      std::sort(deltas.begin(), deltas.end());
      double live = c.static_bytes[r], peak = live;
      auto& curve = result_.memory[out];
      curve.push_back({0.0, live});
      for (const auto& [t, d] : deltas) {
        live += d;
        peak = std::max(peak, live);
        if (!curve.empty() && curve.back().time_s == t) {
          curve.back().bytes = live;
        } else {
          curve.push_back({t, live});
        }
      }
      result_.peak_mem_bytes[out] = peak;
      busy_total += result_.busy_s[out];
    }
  }
  result_.bubble_ratio =
      iteration_time_s_ > 0 ? 1.0 - busy_total / (static_cast<double>(reps * p) * iteration_time_s_) : 0.0;
  memory_stale_ = false;
}

const SimResult& Simulator::result() {
  if (memory_stale_) ComputeMemory();
  return result_;
}

SimResult Simulate(const Schedule& schedule, const PipelineCosts& costs, const SimOptions& options) {
  Simulator sim(schedule, {costs}, options);
  return sim.result();
}

}  // namespace loom
