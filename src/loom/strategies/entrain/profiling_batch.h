// Entrain's minimum stable profiling batch size (seed 004 §4.4.2, Algorithm 2
// with the listing's indentation corrected, App. C): the smallest batch whose
// macroscopic workload proportions give the same GPU allocation on k fresh
// draws, k = ceil(ln alpha / ln(1 - p_error)) (Eq. C.5: 59 at 0.05 / 0.05).
// If all k draws agree, then with confidence 1 - alpha a fresh batch of that
// size changes the allocation with probability at most p_error (Eq. C.4).
//
// ProportionalAllocation (the thesis: "rounding to the nearest feasible
// integers"; Loom's rule): the per-replica GPUs go to the components in
// proportion to their work, in whole units of `unit` GPUs (a TP group: what
// the hardware can build), every component at least one unit, the rest by
// largest remainder (Hamilton's method; ties to the lower component). On 2
// GPUs, 1 : 0.98 and 1 : 1.12 both give 1 : 1, the thesis' example.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "loom/data/rng.h"

namespace loom {

// Eq. C.5. Throws loom::Error unless 0 < alpha < 1 and 0 < p_error < 1.
int ValidationTrials(double alpha, double p_error);

// GPUs per component (each a multiple of unit, summing to gpus). Throws
// loom::Error for no components, a negative proportion, all zero, unit < 1,
// or fewer units than components.
std::vector<int> ProportionalAllocation(int gpus, const std::vector<double>& proportions, int unit);

struct ProfilingBatch {
  int64_t samples = 0;         // b_min
  int trials = 0;              // k
  std::vector<int> gpus;       // the allocation every trial agreed on
  std::vector<int64_t> tried;  // batch sizes tried, doubling
  // Per size tried: the distinct allocations its k + 1 draws gave, most
  // frequent first (ties: first seen); one entry where it was stable (Table 4.2).
  std::vector<std::vector<std::vector<int>>> seen;
};

// `proportions(n, rng)`: the per-component workload of a random batch of n
// samples (EstimateMacroscopicProportions). Doubles n from n0 until k + 1
// draws give the same allocation; deterministic given `seed`. Throws
// loom::Error when n would pass max_samples, naming the last size tried.
ProfilingBatch StableProfilingBatch(const std::function<std::vector<double>(int64_t, Rng&)>& proportions, int gpus,
                                    int unit, double alpha, double p_error, int64_t n0, int64_t max_samples,
                                    uint64_t seed);

}  // namespace loom
