#include "loom/strategies/pipeweaver/full_ilp.h"

#include <map>

#include "loom/algo/milp.h"

namespace loom {

ExactSchedule SolveFullIlp(const StageFlow& flow, double time_limit_s) {
  const int N = static_cast<int>(flow.stages.size());
  double big_m = 0;
  for (const auto& st : flow.stages) {
    big_m += st.time_s;
    for (auto [p, t] : st.preds) big_m += t;
  }
  Milp ilp;
  std::vector<int> s(N);
  for (int u = 0; u < N; ++u) s[u] = ilp.AddVar(0, big_m, 0, false);
  const int C = ilp.AddVar(0, big_m, 1, false);
  for (int u = 0; u < N; ++u) {
    const FlowStage& st = flow.stages[u];
    ilp.AddRow({C, s[u]}, {1, -1}, 'G', st.time_s);  // C >= s_u + lat_u
    for (auto [p, t] : st.preds) ilp.AddRow({s[u], s[p]}, {1, -1}, 'G', flow.stages[p].time_s + t);
  }
  // Order binaries for u < v on the same rank.
  std::vector<std::vector<int>> on_rank(flow.num_ranks);
  for (int u = 0; u < N; ++u) on_rank[flow.stages[u].rank].push_back(u);
  std::map<std::pair<int, int>, int> o;
  for (const auto& ids : on_rank) {
    for (size_t a = 0; a < ids.size(); ++a) {
      for (size_t b = a + 1; b < ids.size(); ++b) {
        const int u = ids[a], v = ids[b];
        const int x = ilp.AddBinary(0);
        o[{u, v}] = x;
        // o = 1: u before v, s_v >= s_u + lat_u; o = 0: s_u >= s_v + lat_v.
        ilp.AddRow({s[v], s[u], x}, {1, -1, -big_m}, 'G', flow.stages[u].time_s - big_m);
        ilp.AddRow({s[u], s[v], x}, {1, -1, big_m}, 'G', flow.stages[v].time_s);
      }
    }
  }
  // before(u, v) = o_uv for u < v, 1 - o_vu otherwise: as (coefficient, constant).
  auto before = [&](int u, int v, std::vector<int>& cols, std::vector<double>& coefs, double scale) {
    if (u < v) {
      cols.push_back(o[{u, v}]);
      coefs.push_back(scale);
      return 0.0;
    }
    cols.push_back(o[{v, u}]);
    coefs.push_back(-scale);
    return scale;
  };
  for (const auto& ids : on_rank) {
    // Transitivity over ordered triples.
    for (int u : ids) {
      for (int v : ids) {
        for (int w : ids) {
          if (u == v || v == w || u == w) continue;
          std::vector<int> cols;
          std::vector<double> coefs;
          double constant = before(u, v, cols, coefs, 1) + before(v, w, cols, coefs, 1) + before(u, w, cols, coefs, -1);
          ilp.AddRow(cols, coefs, 'L', 1 - constant);  // before(u,v) + before(v,w) - before(u,w) <= 1
        }
      }
    }
    // Memory after each stage v: activations of every forward before it (and
    // itself) minus those freed by every backward before it (and itself).
    for (int v : ids) {
      const double cap = flow.capacity_bytes[flow.stages[v].rank];
      auto delta = [&](int u) {
        const FlowStage& st = flow.stages[u];
        return (st.forward ? 1.0 : -1.0) * st.activation_bytes / 1e9;
      };
      std::vector<int> cols;
      std::vector<double> coefs;
      double constant = delta(v);
      for (int u : ids) {
        if (u != v) constant += before(u, v, cols, coefs, delta(u));
      }
      ilp.AddRow(cols, coefs, 'L', cap / 1e9 - constant);
    }
  }
  ExactSchedule out;
  out.variables = static_cast<int>(ilp.vars.size());
  out.rows = static_cast<int>(ilp.rows.size());
  MilpOptions mo;
  mo.time_limit_s = time_limit_s;
  const MilpResult r = SolveMilp(ilp, mo);
  out.solved = r.feasible && r.optimal;
  out.makespan_s = r.objective;
  out.bound_s = r.bound;
  return out;
}

}  // namespace loom
