// Cardinality-constrained subset sum: choose exactly k of n non-negative values
// whose sum is closest to a target. One implementation for every strategy that
// fills a time window with work (MMScale's SELECTCLOSEST, Alg. 3).
#pragma once

#include <vector>

namespace loom {

// Indices (ascending) of exactly k values whose sum is closest to target_sum.
// Dynamic program over sums rounded to a grid of `grid_steps` steps spanning
// [0, sum of the k largest values]: O(n k grid_steps / 64) word operations.
// Guarantee: |sum - target| <= |optimum - target| + k x step, where
// step = (sum of the k largest) / grid_steps. Exact when every value is a
// multiple of the step. Throws loom::Error when k < 0 or k > n.
std::vector<int> ClosestSubsetOfSize(const std::vector<double>& values, int k, double target_sum,
                                     int grid_steps = 1024);

// Indices (ascending) of a subset of any size whose sum is closest to
// target_sum (Entrain's deferral set, §4.5.2: the samples of an overloaded
// microbatch closest to half the gap to its partner). Dynamic program over
// sums on a grid of step = max(1, total / grid_steps) when every value is an
// integer, else total / grid_steps: exact for integers summing to at most
// grid_steps; otherwise |sum - target| <= |optimum - target| + n x step / 2.
// Equally close sums: the smaller wins (less work moved, less buffered).
// Throws loom::Error for a negative value or grid_steps < 1.
std::vector<int> ClosestSubset(const std::vector<double>& values, double target_sum, int grid_steps = 4096);

}  // namespace loom
