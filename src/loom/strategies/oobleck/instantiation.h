// Oobleck §2.4.2: instantiating pipelines from templates.
//   - Eq. 2.5, the coin-change enumeration: X(p', N') = X(p' - 1, N') ++
//     θ(X(p', N' - n_p'), p'), with X(., 0) = {0}, X(0, N' > 0) = {} and
//     X(., N' < 0) = {} (the thesis gives no base cases; these are the
//     standard ones), then the vectors with at least f + 1 pipelines.
//   - Eq. 2.6, batch distribution: N_b per template (pipelines of one
//     template are identical, so they get the same count: the thesis indexes
//     the objective by pipeline and the constraint by template), minimizing
//     Σ over pipelines (N_b,i T_i - mean)² subject to Σ x_j N_b,j = B / b,
//     every N_b >= 1. Solved exactly: every count vector in a window around
//     the continuous optimum (N_j T_j equal), widened until no better vector
//     can lie outside it (see DistributeBatch).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/strategies/oobleck/template_sizes.h"

namespace loom::oobleck {

// Every x with Σ x_j sizes[j] = nodes, in the order Eq. 2.5 builds them (the
// table's last cell). Throws loom::Error past `limit` vectors (naming it).
std::vector<std::vector<int>> EnumerateInstantiations(int nodes, const std::vector<int>& sizes,
                                                      int64_t limit = 1000000);
// How many vectors EnumerateInstantiations builds for `nodes` (every cell of
// Eq. 2.5's table up to `nodes`, the empty one included), counted without
// building them and saturating at `cap`: it throws past its limit exactly
// when this exceeds the limit.
int64_t EnumerationSize(int nodes, const std::vector<int>& sizes, int64_t cap);
// Those with at least f + 1 pipelines.
std::vector<std::vector<int>> FeasibleInstantiations(int nodes, const TemplateSizes& templates,
                                                     int64_t limit = 1000000);

struct BatchDistribution {
  std::vector<int> microbatches;  // N_b per template; 0 where x_j = 0
  double objective = 0;           // Σ over pipelines (N_b T - mean)², s²
  double makespan_s = 0;          // max over pipelines N_b T: the iteration's compute estimate
};

// Eq. 2.6. `x`: pipelines per template; `microbatch_time_s`: T_j, a
// template's time per microbatch (> 0 where x_j > 0); `total_microbatches`:
// B / b. Ties: the smaller makespan, then the lexicographically smaller
// vector. Throws loom::Error when no split exists (fewer microbatches than
// pipelines, or a common factor of the x_j that does not divide the total),
// naming the nearest total that splits.
BatchDistribution DistributeBatch(const std::vector<int>& x, const std::vector<double>& microbatch_time_s,
                                  int total_microbatches);

// The nearest microbatch totals at or above `total` and below it (0 if none)
// that split over the pipelines of x (DistributeBatch's condition).
std::pair<int, int> NearestDistributable(const std::vector<int>& x, int total);

// "2 x 3 nodes + 1 x 4 nodes" for reports.
std::string DescribeInstantiation(const std::vector<int>& x, const std::vector<int>& sizes);

}  // namespace loom::oobleck
