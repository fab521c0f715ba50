#include "loom/strategies/mosaic/stage_eval.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>

#include "loom/algo/milp.h"
#include "loom/error.h"

namespace loom::mosaic {

StageEvaluator::StageEvaluator(const std::vector<ModuleSurface>& surfaces, int gpus, double mem_bytes_per_gpu,
                               SmPartitionRules rules, SmSharing sharing, StageEvalOptions options)
    : surfaces_(surfaces),
      gpus_(gpus),
      mem_bytes_(mem_bytes_per_gpu),
      rules_(rules),
      sharing_(sharing),
      options_(options) {
  if (!options_.interference) {
    sharing_.e1 = sharing_.e2 = sharing_.e3 = 0;
    sharing_.launch_floor_s_per_layer = 0;
  }
  if (options_.additive_only) sharing_.e3 = 0;
}

bool StageEvaluator::AllCanBeat(const std::vector<int>& modules, double bound_s) const {
  for (int m : modules) {
    bool any = false;
    for (const auto& p : surfaces_[m].points) {
      if (p.latency_s < bound_s && p.mem_bytes <= mem_bytes_ && p.dp <= gpus_) {
        any = true;
        break;
      }
    }
    if (!any) return false;
  }
  return true;
}

double StageEvaluator::Rectify(std::vector<Placement>* placements) const {
  // Per GPU: the modules on it, their bandwidth utilisations and floors.
  std::vector<std::vector<int>> on(gpus_);
  for (int i = 0; i < static_cast<int>(placements->size()); ++i) {
    const auto& p = (*placements)[i];
    for (int g = p.first_gpu; g < p.first_gpu + p.dp; ++g) on[g].push_back(i);
  }
  auto point = [&](const Placement& p) -> const SurfacePoint& { return surfaces_[p.module].At(p.dp, p.pp, p.sms); };
  double stage = 0;
  for (int i = 0; i < static_cast<int>(placements->size()); ++i) {
    auto& p = (*placements)[i];
    const SurfacePoint& sp = point(p);
    double worst = sp.latency_s;
    for (int g = p.first_gpu; g < p.first_gpu + p.dp; ++g) {
      std::vector<double> bw{sp.bandwidth};
      double floors = 0;
      for (int j : on[g]) {
        floors += point((*placements)[j]).launch_floor_s;
        if (j != i) bw.push_back(point((*placements)[j]).bandwidth);
      }
      // Eq. 7: the slowest GPU of the module sets its pace; never under the
      // shared host's floors.
      worst = std::max({worst, sp.latency_s * (1 + sharing_.Slowdown(bw)), floors});
    }
    p.latency_s = worst;
    stage = std::max(stage, worst);
  }
  return stage;
}

void StageEvaluator::SetResident(std::vector<double> resident_bytes, bool holds_all) {
  if (!resident_bytes.empty() && static_cast<int>(resident_bytes.size()) != gpus_) {
    throw Error("mosaic: internal: resident memory for another number of GPUs");
  }
  resident_ = std::move(resident_bytes);
  holds_all_ = !resident_.empty() && holds_all;
}

namespace {

struct Option {
  int module = 0;  // position in the stage
  int dp = 1, sms = 0, pp = 1;
  double mem = 0, floor = 0;
};

// What is left on each GPU while modules are placed: SMs, partitionable SMs,
// memory and host time under the target.
struct GpuLoad {
  std::vector<int> sm_left, part_left, users;
  std::vector<double> mem_left, floor_left;
  int sm_count = 0;
  GpuLoad(int gpus, const SmPartitionRules& rules, const std::vector<double>& caps, double tau)
      : sm_left(gpus, rules.sm_count),
        part_left(gpus, rules.partitionable_sms),
        users(gpus, 0),
        mem_left(caps),
        floor_left(gpus, tau),
        sm_count(rules.sm_count) {}
  // Whether `o` fits on GPUs [start, start + o.dp); `left` gets the SMs it would leave free.
  bool Fits(const Option& o, int start, int* left, bool* empty) const {
    *left = 0;
    *empty = true;
    for (int g = start; g < start + o.dp; ++g) {
      *empty = *empty && users[g] == 0;
      if (sm_left[g] < o.sms || mem_left[g] < o.mem || floor_left[g] < o.floor - 1e-15 ||
          (o.sms < sm_count && part_left[g] < o.sms)) {
        return false;
      }
      *left += sm_left[g] - o.sms;
    }
    return true;
  }
  // Places (sign 1) or removes (sign -1) `o` on its block.
  void Take(const Option& o, int start, int sign) {
    for (int g = start; g < start + o.dp; ++g) {
      if (o.sms < sm_count) part_left[g] -= sign * o.sms;
      sm_left[g] -= sign * o.sms;
      mem_left[g] -= sign * o.mem;
      floor_left[g] -= sign * o.floor;
      users[g] += sign;
    }
  }
};

// Modules by decreasing demand (SM-GPUs of their leanest option), ties by position.
std::vector<int> DemandOrder(const std::vector<std::vector<Option>>& options) {
  std::vector<double> lean(options.size(), 1e300);
  for (size_t k = 0; k < options.size(); ++k) {
    for (const auto& o : options[k]) lean[k] = std::min(lean[k], static_cast<double>(o.dp) * o.sms);
  }
  std::vector<int> order(options.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = static_cast<int>(k);
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return lean[a] > lean[b] || (lean[a] == lean[b] && a < b); });
  return order;
}

}  // namespace

bool StageEvaluator::Feasible(const std::vector<int>& modules, double tau, std::vector<Placement>* out) {
  // Per module, per DP degree and pipeline depth, the fewest SMs meeting tau
  // (more SMs at the same degree only use more of the GPU: dominated).
  std::vector<std::vector<Option>> options(modules.size());
  for (size_t k = 0; k < modules.size(); ++k) {
    std::map<std::pair<int, int>, Option> best;
    for (const auto& p : surfaces_[modules[k]].points) {
      const double mem = OptionMem(p);
      if (p.latency_s > tau || mem > cap_ || p.dp > gpus_ || p.launch_floor_s > tau) continue;
      auto it = best.find({p.dp, p.pp});
      if (it == best.end() || p.sms < it->second.sms) {
        best[{p.dp, p.pp}] = {static_cast<int>(k), p.dp, p.sms, p.pp, mem, p.launch_floor_s};
      }
    }
    if (best.empty()) return false;
    for (auto& [d, o] : best) options[k].push_back(o);
  }
  // Necessary conditions, summed over the pool (each module at its leanest):
  // SM-GPUs, memory and host floors. Failing one proves infeasibility
  // without CBC (most targets below the optimum fail here).
  {
    double sm_need = 0, mem_need = 0, floor_need = 0;
    for (const auto& opts : options) {
      double sm = 1e300, mem = 1e300, fl = 1e300;
      for (const auto& o : opts) {
        sm = std::min(sm, static_cast<double>(o.dp) * (o.sms == rules_.sm_count ? rules_.sm_count : o.sms));
        mem = std::min(mem, o.dp * o.mem);
        fl = std::min(fl, o.dp * o.floor);
      }
      sm_need += sm;
      mem_need += mem;
      floor_need += fl;
    }
    double mem_have = 0;
    for (double c : caps_) mem_have += std::max(0.0, c);
    if (sm_need > static_cast<double>(gpus_) * rules_.sm_count || mem_need > mem_have ||
        (sharing_.launch_floor_s_per_layer > 0 && floor_need > gpus_ * tau * (1 + 1e-12))) {
      return false;
    }
  }
  auto emit = [&](const std::vector<std::pair<const Option*, int>>& chosen) {
    out->clear();
    for (const auto& [o, start] : chosen) {
      out->push_back({modules[o->module], o->dp, o->pp, o->sms, start, 0});
    }
  };
  const std::vector<int> order = DemandOrder(options);
  if (options_.greedy_first) {
    // Fit heuristics: the most demanding modules first, each on its leanest
    // option (fewest SM-GPUs) at the first aligned block with room, then at
    // the block it fills best; the exact search and CBC only when both fail.
    for (bool best_fit : {false, true}) {
      GpuLoad load(gpus_, rules_, caps_, tau);
      std::vector<std::pair<const Option*, int>> chosen;
      bool ok = true;
      for (int k : order) {
        std::vector<const Option*> by_cost;
        for (const auto& o : options[k]) by_cost.push_back(&o);
        std::sort(by_cost.begin(), by_cost.end(), [](const Option* a, const Option* b) {
          return static_cast<double>(a->dp) * a->sms < static_cast<double>(b->dp) * b->sms ||
                 (static_cast<double>(a->dp) * a->sms == static_cast<double>(b->dp) * b->sms && a->dp < b->dp);
        });
        bool placed = false;
        for (const Option* o : by_cost) {
          int pick = -1, pick_left = 0;
          for (int s = 0; s + o->dp <= gpus_; s += o->dp) {
            int left = 0;
            bool empty = false;
            if (!load.Fits(*o, s, &left, &empty)) continue;
            if (pick < 0 || (best_fit && left < pick_left)) {
              pick = s;
              pick_left = left;
            }
            if (!best_fit) break;
          }
          if (pick < 0) continue;
          load.Take(*o, pick, 1);
          chosen.push_back({o, pick});
          placed = true;
          break;
        }
        if (!placed) {
          ok = false;
          break;
        }
      }
      if (ok) {
        emit(chosen);
        return true;
      }
    }
  }
  // Exact depth-first search over (option, aligned block) per module, most
  // demanding module first, pruned by each GPU's SMs, memory and floors; empty
  // GPUs are interchangeable, so among blocks that are still wholly empty only
  // the first is tried. Settles a stage of up to ~10 modules in microseconds;
  // past its node budget CBC decides.
  if (options_.exact_search) {
    GpuLoad load(gpus_, rules_, caps_, tau);
    std::vector<std::pair<const Option*, int>> chosen;
    long nodes = 0;
    const long budget = 200000;
    std::function<int(size_t)> dfs = [&](size_t i) -> int {  // 1 found, 0 none, -1 budget spent
      if (i == order.size()) return 1;
      if (++nodes > budget) return -1;
      for (const auto& o : options[order[i]]) {
        bool tried_empty = false;
        for (int s = 0; s + o.dp <= gpus_; s += o.dp) {
          int left = 0;
          bool empty = false;
          if (!load.Fits(o, s, &left, &empty) || (empty && tried_empty)) continue;
          tried_empty = tried_empty || empty;
          load.Take(o, s, 1);
          chosen.push_back({&o, s});
          const int r = dfs(i + 1);
          if (r != 0) return r;
          chosen.pop_back();
          load.Take(o, s, -1);
        }
      }
      return 0;
    };
    const int r = dfs(0);
    if (r == 1) {
      emit(chosen);
      return true;
    }
    if (r == 0) return false;
  }
  // The feasibility program: z[option, block start] binary.
  Milp milp;
  struct Var {
    const Option* o;
    int start;
  };
  std::vector<Var> vars;
  std::vector<std::vector<int>> of_module(modules.size());
  std::vector<std::vector<int>> on_gpu(gpus_);
  for (size_t k = 0; k < modules.size(); ++k) {
    for (const auto& o : options[k]) {
      for (int s = 0; s + o.dp <= gpus_; s += o.dp) {
        // A pure feasibility program (zero objective): CBC stops at the
        // first assignment that fits instead of proving one optimal.
        const int v = milp.AddBinary(0);
        vars.push_back({&o, s});
        of_module[k].push_back(v);
        for (int g = s; g < s + o.dp; ++g) on_gpu[g].push_back(v);
      }
    }
  }
  for (const auto& vs : of_module) milp.AddRow(vs, std::vector<double>(vs.size(), 1.0), 'E', 1);
  for (int g = 0; g < gpus_; ++g) {
    const auto& vs = on_gpu[g];
    if (vs.empty()) continue;
    std::vector<double> sms, mem, floors, partial;
    for (int v : vs) {
      sms.push_back(static_cast<double>(vars[v].o->sms) / rules_.sm_count);
      partial.push_back(vars[v].o->sms < rules_.sm_count ? static_cast<double>(vars[v].o->sms) / rules_.sm_count : 0);
      mem.push_back(vars[v].o->mem / 1e9);
      floors.push_back(vars[v].o->floor / tau);  // as a share of the target: coefficients near 1 (CLP's tolerances)
    }
    // Every row scaled to a capacity of 1 (shares of the GPU's SMs, memory, the target).
    milp.AddRow(vs, sms, 'L', 1.0);  // Eq. 5
    if (rules_.partitionable_sms < rules_.sm_count) {
      milp.AddRow(vs, partial, 'L', static_cast<double>(rules_.partitionable_sms) / rules_.sm_count);
    }
    // Memory as a share of the GPU's; a GPU with nothing left takes nothing.
    for (double& m : mem) m = m * 1e9 / mem_bytes_;
    milp.AddRow(vs, mem, 'L', std::max(0.0, caps_[g]) / mem_bytes_);
    if (sharing_.launch_floor_s_per_layer > 0) milp.AddRow(vs, floors, 'L', 1.0);  // the shared host
  }
  ++milp_solves_;
  MilpOptions mo;
  mo.max_nodes = 10000;  // a budget in nodes, not seconds: the same plan on any machine
  const MilpResult r = SolveMilp(milp, mo);
  if (!r.feasible) return false;
  std::vector<std::pair<const Option*, int>> chosen;
  for (size_t v = 0; v < vars.size(); ++v) {
    if (r.x[v] > 0.5) chosen.push_back({vars[v].o, vars[v].start});
  }
  emit(chosen);
  return true;
}

StageResult StageEvaluator::Evaluate(const std::vector<int>& modules, double lower_bound_s) {
  if (modules.size() > 64) throw Error("mosaic: a stage of more than 64 modules");
  uint64_t key = 0;
  for (int m : modules) key |= uint64_t{1} << m;
  const bool cache = options_.cache && resident_.empty();
  if (cache) {
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
  }
  ++evaluations_;
  cap_ = mem_bytes_;
  if (!resident_.empty()) {
    caps_.assign(gpus_, 0);
    cap_ = 0;
    for (int g = 0; g < gpus_; ++g) {
      caps_[g] = mem_bytes_ - resident_[g];
      cap_ = std::max(cap_, caps_[g]);
    }
  } else if (reserve_others_) {
    for (const auto& s : surfaces_) {
      if (key >> s.index & 1) continue;
      double spread = 1e300;
      int widest = 0;
      for (const auto& p : s.points) widest = std::max(widest, std::min(p.dp, gpus_));
      for (const auto& p : s.points) {
        if (p.dp == widest) spread = std::min(spread, p.mem_bytes);
      }
      if (spread < 1e300) cap_ -= spread;
    }
  }
  if (resident_.empty()) caps_.assign(gpus_, cap_);
  std::set<double> candidate_set;
  for (int m : modules) {
    for (const auto& p : surfaces_[m].points) {
      if (OptionMem(p) <= cap_ && p.dp <= gpus_) candidate_set.insert(p.latency_s);
      // The host floor can bind above every latency (several small modules on one GPU).
    }
  }
  std::vector<double> candidates(candidate_set.begin(), candidate_set.end());
  StageResult result;
  if (!candidates.empty()) {
    // Floors summed over the stage: a target no GPU's host can miss.
    double floors = 0;
    for (int m : modules) {
      double f = 0;
      for (const auto& p : surfaces_[m].points) f = std::max(f, p.launch_floor_s);
      floors += f;
    }
    if (floors > candidates.back()) candidates.push_back(floors);
    // Below a subset's own target nothing is feasible.
    auto from = std::lower_bound(candidates.begin(), candidates.end(), lower_bound_s * (1 - 1e-12));
    if (from == candidates.end()) --from;
    candidates.erase(candidates.begin(), from);
    std::vector<Placement> best;
    // Smallest feasible candidate (feasibility is monotone in tau).
    int lo = 0, hi = static_cast<int>(candidates.size()) - 1, found = -1;
    while (lo <= hi) {
      const int mid = (lo + hi) / 2;
      std::vector<Placement> p;
      if (Feasible(modules, candidates[mid], &p)) {
        found = mid;
        best = std::move(p);
        hi = mid - 1;
      } else {
        lo = mid + 1;
      }
    }
    if (found >= 0) {
      result.target_s = candidates[found];
      result.time_s = Rectify(&best);
      result.placements = best;
      // Rectification can make a looser target's allocation better: try the next few.
      for (int next = found + 1; next < std::min<int>(found + 4, candidates.size()); ++next) {
        if (candidates[next] >= result.time_s) break;
        std::vector<Placement> p;
        if (!Feasible(modules, candidates[next], &p)) continue;
        const double t = Rectify(&p);
        if (t < result.time_s) {
          result.time_s = t;
          result.placements = p;
        }
      }
    }
  }
  if (cache) cache_[key] = result;
  return result;
}

}  // namespace loom::mosaic
