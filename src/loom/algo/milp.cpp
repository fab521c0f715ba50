#include "loom/algo/milp.h"

#include <coin/Cbc_C_Interface.h>

#include <limits>
#include <memory>
#include <vector>

#include "loom/error.h"

namespace loom {

int Milp::AddVar(double lower, double upper, double cost, bool integer) {
  vars.push_back({lower, upper, cost, integer});
  return static_cast<int>(vars.size()) - 1;
}

void Milp::AddRow(std::vector<int> cols, std::vector<double> coefs, char sense, double rhs) {
  rows.push_back({std::move(cols), std::move(coefs), sense, rhs});
}

MilpResult SolveMilp(const Milp& p, const MilpOptions& options) {
  std::unique_ptr<Cbc_Model, void (*)(Cbc_Model*)> model(Cbc_newModel(), Cbc_deleteModel);
  Cbc_Model* m = model.get();
  Cbc_setLogLevel(m, 0);
  // One bulk load in column-major form (adding rows one by one copies the matrix each time).
  const int n = static_cast<int>(p.vars.size()), rows = static_cast<int>(p.rows.size());
  std::vector<std::vector<std::pair<int, double>>> by_col(n);
  std::vector<double> row_lo(rows), row_hi(rows);
  constexpr double kInf = std::numeric_limits<double>::infinity();
  for (int r = 0; r < rows; ++r) {
    const Milp::Row& row = p.rows[r];
    for (size_t i = 0; i < row.cols.size(); ++i) by_col[row.cols[i]].push_back({r, row.coefs[i]});
    row_lo[r] = row.sense == 'L' ? -kInf : row.rhs;
    row_hi[r] = row.sense == 'G' ? kInf : row.rhs;
  }
  std::vector<CoinBigIndex> start{0};
  std::vector<int> index;
  std::vector<double> value, lower, upper, cost;
  for (int c = 0; c < n; ++c) {
    for (auto [r, v] : by_col[c]) index.push_back(r), value.push_back(v);
    start.push_back(static_cast<CoinBigIndex>(index.size()));
    lower.push_back(p.vars[c].lower);
    upper.push_back(p.vars[c].upper);
    cost.push_back(p.vars[c].cost);
  }
  Cbc_loadProblem(m, n, rows, start.data(), index.data(), value.data(), lower.data(), upper.data(), cost.data(),
                  row_lo.data(), row_hi.data());
  for (int c = 0; c < n; ++c) {
    if (p.vars[c].integer) Cbc_setInteger(m, c);
  }
  Cbc_setObjSense(m, 1);
  if (options.relative_gap > 0) Cbc_setAllowableFractionGap(m, options.relative_gap);
  if (options.max_nodes > 0) Cbc_setMaximumNodes(m, options.max_nodes);
  if (options.time_limit_s > 0) Cbc_setMaximumSeconds(m, options.time_limit_s);
  if (!options.start.empty()) {
    std::vector<int> idx;
    std::vector<double> val;
    for (size_t i = 0; i < options.start.size() && i < p.vars.size(); ++i) {
      if (!p.vars[i].integer) continue;  // CBC derives the continuous ones
      idx.push_back(static_cast<int>(i));
      val.push_back(options.start[i]);
    }
    Cbc_setMIPStartI(m, static_cast<int>(idx.size()), idx.data(), val.data());
  }
  Cbc_solve(m);
  if (Cbc_status(m) == 2) throw Error("CBC abandoned the problem (numerical difficulties)");
  MilpResult out;
  const double* best = Cbc_bestSolution(m);
  if (best == nullptr) return out;
  out.feasible = true;
  out.optimal = Cbc_isProvenOptimal(m) != 0;
  out.objective = Cbc_getObjValue(m);
  out.bound = Cbc_getBestPossibleObjValue(m);
  out.x.assign(best, best + p.vars.size());
  return out;
}

}  // namespace loom
