#include "loom/algo/milp.h"

#include <coin/Cbc_C_Interface.h>

#include <memory>

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
  for (const auto& v : p.vars) Cbc_addCol(m, "", v.lower, v.upper, v.cost, v.integer ? 1 : 0, 0, nullptr, nullptr);
  for (const auto& r : p.rows) {
    Cbc_addRow(m, "", static_cast<int>(r.cols.size()), r.cols.data(), r.coefs.data(), r.sense, r.rhs);
  }
  Cbc_setObjSense(m, 1);
  if (options.relative_gap > 0) Cbc_setAllowableFractionGap(m, options.relative_gap);
  Cbc_setMaximumSeconds(m, options.time_limit_s);
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
