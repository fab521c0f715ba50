#include "loom/runtime/process_layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <queue>
#include <set>
#include <tuple>

#include "loom/error.h"
#include "loom/pipeline/dependency_graph.h"

namespace loom::runtime {

bool ProcessPlace::IsLocal(int v) const {
  return std::find(local_ranks.begin(), local_ranks.end(), stage_rank[v]) != local_ranks.end();
}

ProcessPlace PlaceProcess(const ExecutionPlan& exec, int process) {
  ProcessPlace p;
  p.layout = LayoutProcesses(exec);
  p.process = process;
  p.group_gpus = p.layout.group_gpus;
  p.group = process / p.group_gpus;
  p.shard = process % p.group_gpus;
  const std::vector<RankCopy> copies =
      p.group < static_cast<int>(p.layout.of_group.size()) ? p.layout.of_group[p.group] : std::vector<RankCopy>{};
  // A replicated plan's process runs one copy of one pipeline rank; other
  // plans' processes run copy 0 of each rank placed on their group.
  p.replica = copies.empty() ? 0 : copies[0].replica;
  p.content = exec.replicated ? p.replica : 0;
  for (const auto& c : copies) p.local_ranks.push_back(c.rank);
  p.stage_rank = exec.schedule.stage_rank;
  for (const ExecStage& s : exec.stages) {
    p.tp.push_back(s.tp);
    p.seq_share.push_back(s.seq_share);
  }
  for (int v = 0; v < p.stages(); ++v) {
    if (!p.IsLocal(v)) continue;
    p.cp = exec.stages[v].cp;
    p.cp_tp = p.tp[v];
    break;
  }
  p.cp_rank = p.cp > 1 ? p.shard / p.cp_tp : 0;
  return p;
}

ProcessLayout LayoutProcesses(const ExecutionPlan& exec) {
  ProcessLayout out;
  out.group_gpus = exec.group_gpus;
  out.ranks = exec.schedule.num_ranks;
  const int copies = exec.replicated ? static_cast<int>(exec.replicas.size()) : 1;
  // A replicated plan's replica j runs its copy of pipeline rank r one
  // replica's groups further per replica (plan/compile_plan.cpp AddDataParallelGroups).
  int stride = 0;
  for (const ExecRank& r : exec.ranks) stride = std::max(stride, r.group + r.num_groups);
  int first = stride;
  for (const ExecRank& r : exec.ranks) first = std::min(first, r.group);
  stride -= first;
  int groups = 0;
  for (int j = 0; j < copies; ++j) {
    for (int r = 0; r < out.ranks; ++r) {
      const ExecRank& er = exec.ranks[r];
      if (er.num_groups != 1) {
        throw Error(
            fmt::format("runtime: rank {} ({}) spans {} GPU groups; stages wider than one group (Oobleck's "
                        "templates) are not run yet",
                        r, er.name, er.num_groups));
      }
      const int g = er.group + (exec.replicated ? j * stride : 0);
      out.instance_group.push_back(g);
      groups = std::max(groups, g + 1);
    }
  }
  out.of_group.assign(groups, {});
  for (int j = 0; j < copies; ++j) {
    for (int r = 0; r < out.ranks; ++r) out.of_group[out.instance_group[j * out.ranks + r]].push_back({r, j});
  }
  out.processes = groups * out.group_gpus;
  return out;
}

std::vector<std::pair<int, int>> ProcessOrder(const ExecutionPlan& exec, const std::vector<int>& local) {
  const Schedule& s = exec.schedule;
  std::vector<std::pair<int, int>> out;
  if (local.size() == 1) {  // one rank: its list as it is
    for (int i = 0; i < static_cast<int>(s.ranks[local[0]].size()); ++i) out.push_back({local[0], i});
    return out;
  }
  const DependencyGraph g = BuildDependencies(s);
  const int n = g.size();
  std::vector<std::vector<int>> succ(n);
  std::vector<int> indegree(n, 0);
  auto link = [&](int from, int to) {
    succ[from].push_back(to);
    ++indegree[to];
  };
  for (int id = 0; id < n; ++id) {
    for (int d = g.dep_begin[id]; d < g.dep_begin[id + 1]; ++d) link(g.dep_id[d], id);
    if (id > g.offset[g.rank[id]]) link(id - 1, id);  // the worker walks a rank's list in order
  }
  // Gloo runs a group's collective once every member issued it: every
  // collective of a group comes before the wait of any rank that uses it.
  std::map<int, std::vector<int>> collectives, waits;  // group -> ids
  for (int r = 0; r < s.num_ranks; ++r) {
    std::set<int> used;
    for (int i = 0; i < static_cast<int>(s.ranks[r].size()); ++i) {
      const Action& a = s.ranks[r][i];
      if (a.kind != ActionKind::kCollective) continue;
      const int group = a.group >= 0 ? a.group : exec.stages[a.stage].dp_group;
      collectives[group].push_back(g.id(r, i));
      used.insert(group);
    }
    for (int i = 0; i < static_cast<int>(s.ranks[r].size()); ++i) {
      if (s.ranks[r][i].kind != ActionKind::kWait) continue;
      for (int group : used) waits[group].push_back(g.id(r, i));
    }
  }
  for (const auto& [group, ws] : waits) {
    for (int w : ws) {
      for (int c : collectives[group]) link(c, w);
    }
  }
  // Kahn's algorithm, earliest list position first (ties: lower rank): the
  // ranks advance side by side, as they would running concurrently.
  using Key = std::tuple<int, int, int>;  // (index in rank, rank, id)
  std::priority_queue<Key, std::vector<Key>, std::greater<Key>> ready;
  for (int id = 0; id < n; ++id) {
    if (indegree[id] == 0) ready.push({id - g.offset[g.rank[id]], g.rank[id], id});
  }
  const std::set<int> mine(local.begin(), local.end());
  int seen = 0;
  while (!ready.empty()) {
    const auto [index, rank, id] = ready.top();
    ready.pop();
    ++seen;
    if (mine.count(rank)) out.push_back({rank, index});
    for (int next : succ[id]) {
      if (--indegree[next] == 0) ready.push({next - g.offset[g.rank[next]], g.rank[next], next});
    }
  }
  if (seen != n) throw Error(fmt::format("runtime: schedule {} has a dependency cycle", s.name));
  return out;
}

namespace {

// The range of `module` in a stage's layers, or nullptr.
const LayerRange* RangeOf(const ExecStage& st, const std::string& module) {
  for (const auto& r : st.layers) {
    if (r.module == module) return &r;
  }
  return nullptr;
}

}  // namespace

std::vector<std::vector<BoundaryTensor>> StageOutputs(const Model& model, const ExecutionPlan& exec) {
  const Schedule& s = exec.schedule;
  const int S = s.num_stages();
  const auto edges = s.StageEdges();
  std::vector<std::vector<int>> in(S), out(S);
  std::vector<int> indegree(S, 0);
  for (const auto& e : edges) {
    in[e.to].push_back(e.from);
    out[e.from].push_back(e.to);
    ++indegree[e.to];
  }
  // Stages reachable from each (strictly after it).
  std::vector<std::set<int>> after(S);
  std::vector<int> order;  // topological
  {
    std::vector<int> deg = indegree, stack;
    for (int v = S - 1; v >= 0; --v) {
      if (deg[v] == 0) stack.push_back(v);
    }
    while (!stack.empty()) {
      const int v = stack.back();
      stack.pop_back();
      order.push_back(v);
      for (int w : out[v]) {
        if (--deg[w] == 0) stack.push_back(w);
      }
    }
    if (static_cast<int>(order.size()) != S) throw Error("runtime: the stage graph has a cycle");
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      for (int w : out[*it]) {
        after[*it].insert(w);
        after[*it].insert(after[w].begin(), after[w].end());
      }
    }
  }
  const auto loss = LossStages(model, exec);
  // Whether stage w continues `module` (holds a later layer of it) or starts a module reading it.
  auto reads = [&](int w, int module) {
    for (const auto& r : exec.stages[w].layers) {
      const int mi = model.FindModule(r.module);
      if (mi == module && r.begin > 0) return true;
      if (r.begin == 0) {
        for (int p : model.modules[mi].inputs) {
          if (p == module) return true;
        }
      }
    }
    return false;
  };
  std::vector<std::map<int, int64_t>> held(S);  // module -> width of what the stage holds after its layers
  std::vector<std::vector<BoundaryTensor>> handed(S);
  for (int v : order) {
    for (int u : in[v]) {
      for (const auto& b : handed[u]) held[v][b.module] = b.width;
    }
    for (const auto& r : exec.stages[v].layers) {
      held[v][model.FindModule(r.module)] = OutputWidth(model, model.FindModule(r.module), r.end - 1);
    }
    if (loss[v]) continue;
    for (const auto& [module, width] : held[v]) {
      const LayerRange* own = RangeOf(exec.stages[v], model.modules[module].name);
      bool needed = false;
      for (int w : after[v]) needed = needed || reads(w, module);
      if (own != nullptr && own->end < static_cast<int>(model.modules[module].layers.size()) && !needed) {
        throw Error(fmt::format("runtime: stage {} ({}) stops inside module {} but no later stage continues it", v,
                                exec.stages[v].label, model.modules[module].name));
      }
      if (needed) handed[v].push_back({module, width});
    }
  }
  return handed;
}

std::vector<std::vector<int>> TowerEnds(const Model& model, const ExecutionPlan& exec) {
  const int n = static_cast<int>(model.modules.size());
  std::vector<bool> read(n, false);
  for (const Module& m : model.modules) {
    for (int p : m.inputs) read[p] = true;
  }
  std::vector<std::vector<int>> out(exec.stages.size());
  for (size_t v = 0; v < exec.stages.size(); ++v) {
    for (int mi = 0; mi + 1 < n; ++mi) {
      const LayerRange* r = RangeOf(exec.stages[v], model.modules[mi].name);
      if (!read[mi] && r != nullptr && r->end == static_cast<int>(model.modules[mi].layers.size())) {
        out[v].push_back(mi);
      }
    }
  }
  return out;
}

std::vector<bool> LossStages(const Model& model, const ExecutionPlan& exec) {
  const Module& lm = model.modules.back();
  std::vector<bool> out;
  for (const auto& st : exec.stages) {
    const LayerRange* r = RangeOf(st, lm.name);
    out.push_back(r != nullptr && r->end == static_cast<int>(lm.layers.size()));
  }
  return out;
}

}  // namespace loom::runtime
