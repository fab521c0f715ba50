#include "loom/strategies/pipeweaver/layer_tuning.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "loom/algo/milp.h"

namespace loom {

namespace {

constexpr char kLetter[3] = {'n', 's', 'f'};

double PassTime(const LayerTimes& t) { return t.forward_s + t.backward_data_s + t.backward_weight_s; }

TuningCandidate Measure(const std::vector<std::array<LayerTimes, 3>>& layers, const std::vector<int>& pick) {
  TuningCandidate c;
  for (size_t l = 0; l < layers.size(); ++l) {
    c.time_s += PassTime(layers[l][pick[l]]);
    c.activation_bytes += layers[l][pick[l]].activation_bytes;
    c.layers.push_back(kLetter[pick[l]]);
  }
  return c;
}

}  // namespace

std::vector<TuningCandidate> PairCandidates(const std::vector<std::array<LayerTimes, 3>>& layers, int K, int grid) {
  const int n = static_cast<int>(layers.size());
  std::vector<int> fast(n, 0), frugal(n, 0);
  double lo = 0, hi = 0;
  for (int l = 0; l < n; ++l) {
    for (int c = 1; c < 3; ++c) {
      if (layers[l][c].activation_bytes < layers[l][frugal[l]].activation_bytes) frugal[l] = c;
    }
    lo += layers[l][frugal[l]].activation_bytes;
    hi += layers[l][0].activation_bytes;
  }
  std::vector<TuningCandidate> out{Measure(layers, fast)};
  if (hi - lo < 1 || K < 2) return out;
  // Multiple-choice knapsack: best[g] = least time with extra memory <= g steps.
  const double step = (hi - lo) / grid;
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<double> best(grid + 1, 0.0);
  std::vector<std::vector<int>> took(n, std::vector<int>(grid + 1, -1));
  for (int l = 0; l < n; ++l) {
    std::vector<double> next(grid + 1, kInf);
    for (int c = 0; c < 3; ++c) {
      const double extra = layers[l][c].activation_bytes - layers[l][frugal[l]].activation_bytes;
      const int w = static_cast<int>(std::ceil(extra / step - 1e-9));
      if (w > grid) continue;
      for (int g = w; g <= grid; ++g) {
        const double t = best[g - w] + PassTime(layers[l][c]);
        if (t < next[g]) next[g] = t, took[l][g] = c;
      }
    }
    best = std::move(next);
  }
  for (int q = K - 2; q >= 0; --q) {  // bounds from loose to tight; q = 0 is the most frugal
    int g = static_cast<int>(std::llround(static_cast<double>(q) * grid / (K - 1)));
    if (best[g] == kInf) continue;
    std::vector<int> pick(n);
    for (int l = n - 1; l >= 0; --l) {
      pick[l] = took[l][g];
      const double extra = layers[l][pick[l]].activation_bytes - layers[l][frugal[l]].activation_bytes;
      g -= static_cast<int>(std::ceil(extra / step - 1e-9));
    }
    TuningCandidate c = Measure(layers, q == 0 ? frugal : pick);
    if (std::none_of(out.begin(), out.end(), [&](const TuningCandidate& o) { return o.layers == c.layers; })) {
      out.push_back(std::move(c));
    }
  }
  return out;
}

TuningResult TuneLayers(const StageFlow& flow, const Interleaving& tl, const std::vector<int>& pairs,
                        const std::vector<std::vector<TuningCandidate>>& cands, const TuningOptions& options) {
  const int n = static_cast<int>(pairs.size());
  TuningResult out;
  // Live sets in each rank's execution order (equal to the paper's
  // s_i <= s_k <= t_i, but exact where stages of zero length share a time):
  // pair i is live at pair k's start when i's forward ran no later than k's
  // and i's backward after it.
  std::vector<int> pos(flow.stages.size(), 0);
  for (const auto& order : tl.order) {
    for (size_t x = 0; x < order.size(); ++x) pos[order[x]] = static_cast<int>(x);
  }
  std::vector<int> f(n), b(n);
  for (int i = 0; i < n; ++i) {
    const FlowStage& st = flow.stages[pairs[i]];
    f[i] = pos[pairs[i]];
    b[i] = pos[flow.backward_id[st.stage][st.microbatch]];
  }
  // Only pairs whose forward is followed by a backward (or ends the rank) can
  // be a memory peak: a later forward's live set contains this one's.
  std::vector<char> peak(n, 0);
  for (int k = 0; k < n; ++k) {
    const auto& order = tl.order[flow.stages[pairs[k]].rank];
    const size_t next = static_cast<size_t>(f[k]) + 1;
    peak[k] = next >= order.size() || !flow.stages[order[next]].forward;
  }
  std::vector<std::vector<int>> live(n);
  std::vector<std::vector<int>> rows_of(n);
  for (int k = 0; k < n; ++k) {
    if (!peak[k]) continue;
    const int rank = flow.stages[pairs[k]].rank;
    for (int i = 0; i < n; ++i) {
      if (flow.stages[pairs[i]].rank == rank && f[i] <= f[k] && f[k] < b[i]) {
        live[k].push_back(i);
        rows_of[i].push_back(k);
      }
    }
  }
  auto cap = [&](int k) { return flow.capacity_bytes[flow.stages[pairs[k]].rank]; };
  // Greedy warm start: every pair at its most frugal candidate, then each pair
  // (largest saving first) moves to the fastest candidate that keeps every row.
  std::vector<int> pick(n);
  std::vector<double> usage(n, 0.0);
  for (int i = 0; i < n; ++i) {
    pick[i] = 0;
    for (int c = 1; c < static_cast<int>(cands[i].size()); ++c) {
      if (cands[i][c].activation_bytes < cands[i][pick[i]].activation_bytes) pick[i] = c;
    }
  }
  for (int k = 0; k < n; ++k) {
    if (live[k].empty()) continue;  // not a peak
    for (int i : live[k]) usage[k] += cands[i][pick[i]].activation_bytes;
    if (usage[k] > cap(k) + 1e-6) return out;  // nothing fits
  }
  std::vector<int> by_saving(n);
  std::iota(by_saving.begin(), by_saving.end(), 0);
  auto saving = [&](int i) { return cands[i][pick[i]].time_s - cands[i][0].time_s; };
  std::stable_sort(by_saving.begin(), by_saving.end(), [&](int a, int b) { return saving(a) > saving(b); });
  for (int i : by_saving) {
    for (int c = 0; c < static_cast<int>(cands[i].size()); ++c) {  // fastest first
      if (cands[i][c].time_s >= cands[i][pick[i]].time_s) break;
      const double delta = cands[i][c].activation_bytes - cands[i][pick[i]].activation_bytes;
      const bool ok =
          std::all_of(rows_of[i].begin(), rows_of[i].end(), [&](int k) { return usage[k] + delta <= cap(k) + 1e-6; });
      if (!ok) continue;
      for (int k : rows_of[i]) usage[k] += delta;
      pick[i] = c;
      break;
    }
  }
  out.feasible = true;
  out.choice = pick;
  for (int i = 0; i < n; ++i) out.greedy_s += cands[i][pick[i]].time_s;
  out.objective_s = out.greedy_s;
  if (!options.use_solver) return out;

  // Only rows that can bind matter (the live pairs' largest candidates
  // overflow), and only pairs in such a row need variables: every other pair
  // takes its fastest candidate. Dropping the rest is exact and keeps the ILP
  // small when most of the timeline has room.
  std::vector<char> binding(n, 0), free_pair(n, 0);
  for (int k = 0; k < n; ++k) {
    double most = 0;
    for (int i : live[k]) most += cands[i][0].activation_bytes;  // candidate 0 is the fastest and largest
    binding[k] = !live[k].empty() && most > cap(k) + 1e-6;
    if (binding[k]) {
      for (int i : live[k]) free_pair[i] = 1;
    }
  }
  Milp ilp;
  std::vector<std::vector<int>> var(n);
  std::vector<double> start;
  double fixed_s = 0;
  for (int i = 0; i < n; ++i) {
    if (!free_pair[i]) {
      fixed_s += cands[i][0].time_s;
      continue;
    }
    for (int c = 0; c < static_cast<int>(cands[i].size()); ++c) {
      var[i].push_back(ilp.AddBinary(cands[i][c].time_s));
      start.push_back(c == pick[i] ? 1.0 : 0.0);
    }
    ilp.AddRow(var[i], std::vector<double>(var[i].size(), 1.0), 'E', 1.0);
  }
  for (int k = 0; k < n; ++k) {
    if (!binding[k]) continue;
    std::vector<int> cols;
    std::vector<double> coefs;
    for (int i : live[k]) {
      for (size_t c = 0; c < cands[i].size(); ++c) {
        cols.push_back(var[i][c]);
        coefs.push_back(cands[i][c].activation_bytes / 1e9);  // GB keeps the coefficients well scaled
      }
    }
    ilp.AddRow(cols, coefs, 'L', cap(k) / 1e9);
  }
  out.variables = static_cast<int>(ilp.vars.size());
  out.rows = static_cast<int>(ilp.rows.size());
  if (out.variables > options.max_variables) return out;
  MilpOptions mo;
  mo.relative_gap = options.relative_gap;
  mo.max_nodes = options.max_nodes;
  mo.start = start;
  if (ilp.vars.empty()) {  // nothing binds: every pair at its fastest
    for (int i = 0; i < n; ++i) out.choice[i] = 0;
    out.objective_s = fixed_s;
    out.optimal = true;
    return out;
  }
  const MilpResult r = SolveMilp(ilp, mo);
  if (!r.feasible || r.objective + fixed_s > out.greedy_s) return out;
  out.optimal = r.optimal;
  out.objective_s = 0;
  for (int i = 0; i < n; ++i) {
    if (!free_pair[i]) {
      out.choice[i] = 0;
    } else {
      for (size_t c = 0; c < cands[i].size(); ++c) {
        if (r.x[var[i][c]] > 0.5) out.choice[i] = static_cast<int>(c);
      }
    }
    out.objective_s += cands[i][out.choice[i]].time_s;
  }
  return out;
}

}  // namespace loom
