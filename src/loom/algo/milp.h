// A small mixed-integer linear program and its solution by COIN-OR CBC (the
// open-source branch-and-cut solver, Debian coinor-libcbc-dev). Serves
// PipeWeaver's layer-tuning ILP (§6.3) and the full scheduling ILP of §3.1
// that tests compare the search against. Minimisation only; a program is a
// plain value, solved in one call, never shared between threads.
#pragma once

#include <vector>

namespace loom {

struct Milp {
  struct Var {
    double lower = 0, upper = 1, cost = 0;
    bool integer = false;
  };
  // sum cols[i] * coefs[i]  (sense: 'L' <=, 'G' >=, 'E' ==)  rhs
  struct Row {
    std::vector<int> cols;
    std::vector<double> coefs;
    char sense = 'L';
    double rhs = 0;
  };
  std::vector<Var> vars;
  std::vector<Row> rows;

  int AddVar(double lower, double upper, double cost, bool integer);
  int AddBinary(double cost) { return AddVar(0, 1, cost, true); }
  void AddRow(std::vector<int> cols, std::vector<double> coefs, char sense, double rhs);
};

struct MilpOptions {
  double relative_gap = 0;    // stop once (incumbent - bound) / |incumbent| <= gap (PipeWeaver §6.3: 5%)
  // Branch-and-bound nodes before CBC stops with its incumbent; 0: no limit.
  // A node budget gives the same answer on any machine (standing rule 5).
  int max_nodes = 0;
  // Wall-clock cap, for callers whose user asked for one; 0: none.
  double time_limit_s = 0;
  std::vector<double> start;  // a warm start (one value per variable), or empty
};

struct MilpResult {
  bool feasible = false;  // an integer solution was found
  bool optimal = false;   // proven optimal (within the gap)
  double objective = 0;   // of the best solution
  double bound = 0;       // best lower bound CBC proved
  std::vector<double> x;  // the best solution, one value per variable
};

// Throws loom::Error when CBC abandons the problem (numerical trouble).
MilpResult SolveMilp(const Milp& program, const MilpOptions& options = {});

}  // namespace loom
