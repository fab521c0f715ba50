// MMScale's adaptive resource allocation (paper §4.2-4.3, Alg. 1): each unit
// (encoder, backbone, generator) gets its own TP, DP and PP, and the GPUs are
// split between units to minimise the analytic iteration time
//   T_iter = T_warm + T_steady                                   (Eq. 1, 2)
//   stage time T_u  = (DP_lm / DP_u) x C_u(TP_u) / PP_u
//   T_warm          = sum_u PP_u x T_u  (/ VPP for interleaved 1F1B)
//   T_steady        = max_u T_u x (BS / DP_lm - 1)
// where C_u(TP) is the forward + backward time of the whole unit for one
// backbone microbatch (one sample; the backbone's microbatch size is 1).
// With TP and DP fixed, T_warm is a constant and T_steady = (m - 1) x
// max_u a_u / x_u with a_u = DP_lm x TP_u x C_u and x_u = TP_u DP_u PP_u GPUs:
// the continuous split is water-filling (ContinuousSplit) and the integer one
// is solved exactly by raising the bottleneck (IntegerSplit). Memory (weights
// and gradients / PP, ZeRO-1 optimizer / (DP PP), activations of one
// microbatch per TP rank) bounds PP from below. Plain values, no cost model:
// mmscale.cpp fills the UnitModels from it (docs/strategies.md, "mmscale").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom {

// One unit at one TP degree, as the allocator sees it.
struct UnitModel {
  int tp = 1;
  double time_s = 0;            // C_u(TP): fwd + bwd of the whole unit for one sample, TP comm included
  double weight_bytes = 0;      // weights + gradients of the whole unit per TP rank (divided by PP)
  double optimizer_bytes = 0;   // optimizer state of the whole unit per TP rank (divided by DP x PP, ZeRO-1)
  double activation_bytes = 0;  // peak activations per GPU for one sample per microbatch (paper: L / TP)
};

struct AllocationUnit {
  std::string name;
  std::vector<UnitModel> options;  // one per TP degree to try
  int max_pp = 1;                  // layers: PP never exceeds it
  bool backbone = false;           // exactly one unit is the backbone
};

struct AllocationProblem {
  std::vector<AllocationUnit> units;  // in pipeline order
  int num_gpus = 0;
  int64_t global_batch = 0;
  double gpu_mem_bytes = 0;
  int vpp = 1;                  // interleaved 1F1B: T_warm / vpp
  std::vector<int> dp_choices;  // empty: the divisors of global_batch (paper §4.3)
  int node_gpus = 8;            // TP <= node_gpus
  // Loom plans cut GPUs into equal groups (plan/plan.h) of the largest TP
  // among the units: every unit's TP x DP must be a multiple of it, and no
  // unit may have more such groups per PP stage than the backbone's DP (a
  // global microbatch holds DP_lm samples; a group with none would idle).
  bool align_to_largest_tp = true;
};

struct UnitChoice {
  int option = 0;  // index into AllocationUnit::options
  int tp = 1, dp = 1, pp = 1;
  int gpus() const { return tp * dp * pp; }
  bool operator==(const UnitChoice&) const = default;
};

struct Allocation {
  std::vector<UnitChoice> units;
  double warmup_s = 0, steady_s = 0;
  double iteration_s() const { return warmup_s + steady_s; }
  double continuous_iteration_s = 0;  // T_warm + the water-filling optimum for the same TP and DP
};

// Eq. 1 + 2 for a full choice (PP may be any positive number for checks).
double StageTime_s(const AllocationProblem& p, const std::vector<UnitChoice>& c, int u);
double WarmupTime_s(const AllocationProblem& p, const std::vector<UnitChoice>& c);
double SteadyTime_s(const AllocationProblem& p, const std::vector<UnitChoice>& c);
// Whether every unit fits in GPU memory under the paper's memory model.
bool FitsMemory(const AllocationProblem& p, const std::vector<UnitChoice>& c);

// min_x max_u a_u / x_u  s.t.  sum x_u <= budget, x_u >= lower_u  (water-filling).
// Returns the optimal level tau (x_u = max(lower_u, a_u / tau)); +inf when the
// lower bounds alone exceed the budget.
double ContinuousSplit(const std::vector<double>& a, const std::vector<double>& lower, double budget,
                       std::vector<double>* x = nullptr);

// min_k max_u a_u / (cost_u k_u)  s.t.  sum cost_u k_u <= budget, kmin_u <= k_u <= kmax_u,
// k integer. Exact (scans the level upward from the continuous optimum through
// every breakpoint). Returns false when no k fits.
bool IntegerSplit(const std::vector<double>& a, const std::vector<int>& cost, const std::vector<int>& kmin,
                  const std::vector<int>& kmax, int budget, std::vector<int>& k);

// Alg. 1: every TP x DP per unit, exact split for each; the `keep` best
// allocations, best first (distinct choices). Empty when nothing fits.
std::vector<Allocation> AllocateResources(const AllocationProblem& p, int keep = 1);

// The paper's ratio-based baseline (§7.2.1): GPUs in proportion to each unit's
// FLOPs (flops_per_sample[u]), rounded to whole TP x DP multiples, best TP x DP
// by the same objective.
std::vector<Allocation> RatioAllocation(const AllocationProblem& p, const std::vector<double>& flops_per_sample,
                                        int keep = 1);

// Brute force for tests: every TP, DP and PP per unit.
Allocation BruteForceAllocation(const AllocationProblem& p);

}  // namespace loom
