#include "loom/strategies/mosaic/mapping_solver.h"

#include <algorithm>
#include <functional>
#include <limits>

#include "loom/error.h"

namespace loom::mosaic {

bool Mapping::feasible() const {
  for (const auto& s : stages) {
    if (!s.result.feasible()) return false;
  }
  return !stages.empty();
}

std::vector<std::vector<int>> ModuleDeps(const Model& model) {
  std::vector<std::vector<int>> deps;
  for (const auto& m : model.modules) deps.push_back(m.inputs);
  return deps;
}

namespace {

// Stage graph of a partition: edge a -> b when a module of b reads one of a.
// Returns the stage of each module.
std::vector<int> StageOf(const std::vector<std::vector<int>>& stages, int n) {
  std::vector<int> of(n, -1);
  for (int s = 0; s < static_cast<int>(stages.size()); ++s) {
    for (int m : stages[s]) of[m] = s;
  }
  return of;
}

// reach[a][b]: a directed path a -> ... -> b in the stage graph; false when
// the graph has a cycle or an edge inside a stage (illegal partition: *ok = false).
std::vector<std::vector<bool>> Reach(const std::vector<std::vector<int>>& deps,
                                     const std::vector<std::vector<int>>& stages, bool* ok) {
  const int k = static_cast<int>(stages.size());
  const auto of = StageOf(stages, static_cast<int>(deps.size()));
  std::vector<std::vector<bool>> reach(k, std::vector<bool>(k, false));
  *ok = true;
  for (int m = 0; m < static_cast<int>(deps.size()); ++m) {
    for (int d : deps[m]) {
      if (of[d] == of[m]) *ok = false;  // Eq. 3 is strict
      reach[of[d]][of[m]] = true;
    }
  }
  for (int via = 0; via < k; ++via) {
    for (int a = 0; a < k; ++a) {
      if (!reach[a][via]) continue;
      for (int b = 0; b < k; ++b) {
        if (reach[via][b]) reach[a][b] = true;
      }
    }
  }
  for (int a = 0; a < k; ++a) {
    if (reach[a][a]) *ok = false;
  }
  return reach;
}

// Stages in a topological order of the stage graph (stable: earlier first
// module first among the ready).
std::vector<Stage> TopoOrder(const std::vector<std::vector<int>>& deps, std::vector<Stage> stages) {
  std::vector<std::vector<int>> mods;
  for (const auto& s : stages) mods.push_back(s.modules);
  bool ok = true;
  const auto reach = Reach(deps, mods, &ok);
  if (!ok) throw Error("mosaic: internal: a stage list with a cycle");
  std::vector<Stage> out;
  std::vector<bool> done(stages.size(), false);
  while (out.size() < stages.size()) {
    int pick = -1;
    for (int s = 0; s < static_cast<int>(stages.size()); ++s) {
      if (done[s]) continue;
      bool ready = true;
      for (int t = 0; t < static_cast<int>(stages.size()); ++t) {
        if (!done[t] && t != s && reach[t][s]) ready = false;
      }
      if (ready && (pick < 0 || stages[s].modules.front() < stages[pick].modules.front())) pick = s;
    }
    done[pick] = true;
    out.push_back(std::move(stages[pick]));
  }
  return out;
}

double Total(const std::vector<Stage>& stages) {
  double t = 0;
  for (const auto& s : stages) t += s.result.time_s;
  return t;
}

}  // namespace

namespace {

// Alg. 1's merging from `stages`, then Loom's refinement (options.refine).
Mapping MergeAndRefine(const std::vector<std::vector<int>>& deps, StageEvaluator& eval, const MappingOptions& options,
                       std::vector<Stage> stages) {
  Mapping out;
  while (stages.size() > 1) {
    std::vector<std::vector<int>> mods;
    for (const auto& s : stages) mods.push_back(s.modules);
    bool ok = true;
    const auto reach = Reach(deps, mods, &ok);
    double best_gain = 0;
    int bx = -1, by = -1;
    StageResult best_result;
    for (int x = 0; x < static_cast<int>(stages.size()); ++x) {
      for (int y = x + 1; y < static_cast<int>(stages.size()); ++y) {
        if (reach[x][y] || reach[y][x]) continue;  // Alg. 1 line 9: would violate E
        ++out.pairs_visited;
        const double tx = stages[x].result.time_s, ty = stages[y].result.time_s;
        std::vector<int> merged = stages[x].modules;
        merged.insert(merged.end(), stages[y].modules.begin(), stages[y].modules.end());
        std::sort(merged.begin(), merged.end());
        // Alg. 1 line 11, EarlyPrune: the merged stage must beat tx + ty - best_gain.
        if (options.early_prune && best_gain > 0 && !eval.AllCanBeat(merged, tx + ty - best_gain)) {
          ++out.pruned;
          continue;
        }
        StageResult r = eval.Evaluate(merged, std::max(stages[x].result.target_s, stages[y].result.target_s));
        const double gain = tx + ty - r.time_s;  // Eq. 9
        if (r.feasible() && gain > best_gain * (1 + 1e-12) + 1e-15) {
          best_gain = gain;
          bx = x;
          by = y;
          best_result = std::move(r);
        }
      }
    }
    if (bx < 0) break;  // Alg. 1 lines 17-18: no merge gains
    Stage merged;
    merged.modules = stages[bx].modules;
    merged.modules.insert(merged.modules.end(), stages[by].modules.begin(), stages[by].modules.end());
    std::sort(merged.modules.begin(), merged.modules.end());
    merged.result = std::move(best_result);
    stages.erase(stages.begin() + by);
    stages[bx] = std::move(merged);
    stages = TopoOrder(deps, std::move(stages));
  }
  // Loom's addition: greedy merging cannot undo a merge, so after it stops,
  // move single modules to another stage or to a stage of their own while
  // that shortens the sum (first improving move in (module, target) order).
  if (options.refine) {
    for (bool improved = true; improved;) {
      improved = false;
      const double now = Total(stages);
      for (int s = 0; s < static_cast<int>(stages.size()) && !improved; ++s) {
        for (size_t k = 0; k < stages[s].modules.size() && !improved; ++k) {
          const int m = stages[s].modules[k];
          for (int t = -1; t < static_cast<int>(stages.size()) && !improved; ++t) {
            if (t == s || (t == -1 && stages[s].modules.size() == 1)) continue;
            std::vector<std::vector<int>> mods;
            for (const auto& st : stages) mods.push_back(st.modules);
            mods[s].erase(mods[s].begin() + k);
            if (t >= 0) {
              mods[t].push_back(m);
              std::sort(mods[t].begin(), mods[t].end());
            } else {
              mods.push_back({m});
            }
            if (mods[s].empty()) mods.erase(mods.begin() + s);
            bool ok = true;
            Reach(deps, mods, &ok);
            if (!ok) continue;
            std::vector<Stage> next;
            for (const auto& ms : mods) next.push_back({ms, eval.Evaluate(ms)});
            if (Total(next) < now * (1 - 1e-12)) {
              stages = TopoOrder(deps, std::move(next));
              ++out.refinements;
              improved = true;
            }
          }
        }
      }
      // Then swaps of two modules between two stages (first improving pair
      // in (stage, module) order): what no single move reaches when both
      // stages are full.
      for (int s = 0; s < static_cast<int>(stages.size()) && !improved; ++s) {
        for (int t = s + 1; t < static_cast<int>(stages.size()) && !improved; ++t) {
          for (size_t i = 0; i < stages[s].modules.size() && !improved; ++i) {
            for (size_t j = 0; j < stages[t].modules.size() && !improved; ++j) {
              std::vector<std::vector<int>> mods;
              for (const auto& st : stages) mods.push_back(st.modules);
              std::swap(mods[s][i], mods[t][j]);
              std::sort(mods[s].begin(), mods[s].end());
              std::sort(mods[t].begin(), mods[t].end());
              bool ok = true;
              Reach(deps, mods, &ok);
              if (!ok) continue;
              const StageResult rs = eval.Evaluate(mods[s]), rt = eval.Evaluate(mods[t]);
              if (!(rs.time_s + rt.time_s < (stages[s].result.time_s + stages[t].result.time_s) * (1 - 1e-12))) {
                continue;
              }
              std::vector<Stage> next;
              for (size_t k = 0; k < mods.size(); ++k) {
                next.push_back({mods[k], static_cast<int>(k) == s   ? rs
                                         : static_cast<int>(k) == t ? rt
                                                                    : stages[k].result});
              }
              stages = TopoOrder(deps, std::move(next));
              ++out.refinements;
              improved = true;
            }
          }
        }
      }
    }
  }
  out.stages = std::move(stages);
  out.time_s = Total(out.stages);
  return out;
}

}  // namespace

Mapping SolveGahc(const std::vector<std::vector<int>>& deps, StageEvaluator& eval, const MappingOptions& options) {
  const int n = static_cast<int>(deps.size());
  // Alg. 1 lines 3-5: one stage per module, in topological (model) order.
  std::vector<Stage> singles;
  for (int m = 0; m < n; ++m) singles.push_back({{m}, eval.Evaluate({m})});
  Mapping best = MergeAndRefine(deps, eval, options, singles);
  if (!options.refine) return best;  // the paper's Alg. 1 alone
  // Loom's second start: modules grouped by their depth in the dependency
  // graph (every module with the same longest path from a source in one
  // stage; a legal partition), merged and refined the same way; the better
  // of the two is kept (ties: the first).
  std::vector<int> depth(n, 0);
  for (int m = 0; m < n; ++m) {
    for (int d : deps[m]) depth[m] = std::max(depth[m], depth[d] + 1);  // inputs come first (model order)
  }
  std::vector<std::vector<int>> levels(*std::max_element(depth.begin(), depth.end()) + 1);
  for (int m = 0; m < n; ++m) levels[depth[m]].push_back(m);
  std::vector<Stage> layered;
  for (const auto& l : levels) {
    if (!l.empty()) layered.push_back({l, eval.Evaluate(l)});
  }
  bool feasible = true;
  for (const auto& st : layered) feasible = feasible && st.result.feasible();
  if (feasible) {
    Mapping other = MergeAndRefine(deps, eval, options, TopoOrder(deps, std::move(layered)));
    other.pairs_visited += best.pairs_visited;
    other.pruned += best.pruned;
    other.refinements += best.refinements;
    if (other.time_s < best.time_s * (1 - 1e-12)) return other;
    best.pairs_visited = other.pairs_visited;
    best.pruned = other.pruned;
    best.refinements = other.refinements;
  }
  return best;
}

Mapping SolveExhaustive(const std::vector<std::vector<int>>& deps, StageEvaluator& eval) {
  const int n = static_cast<int>(deps.size());
  Mapping best;
  best.time_s = std::numeric_limits<double>::infinity();
  std::vector<std::vector<int>> parts;
  // Restricted-growth enumeration of set partitions.
  std::function<void(int)> rec = [&](int m) {
    if (m == n) {
      bool ok = true;
      Reach(deps, parts, &ok);
      if (!ok) return;
      std::vector<Stage> stages;
      double t = 0;
      for (const auto& p : parts) {
        stages.push_back({p, eval.Evaluate(p)});
        t += stages.back().result.time_s;
        if (!(t < best.time_s)) return;
      }
      best.stages = TopoOrder(deps, std::move(stages));
      best.time_s = t;
      return;
    }
    for (size_t s = 0; s < parts.size(); ++s) {
      parts[s].push_back(m);
      rec(m + 1);
      parts[s].pop_back();
    }
    parts.push_back({m});
    rec(m + 1);
    parts.pop_back();
  };
  rec(0);
  return best;
}

}  // namespace loom::mosaic
