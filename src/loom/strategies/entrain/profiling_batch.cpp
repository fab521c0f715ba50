#include "loom/strategies/entrain/profiling_batch.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "loom/error.h"

namespace loom {

int ValidationTrials(double alpha, double p_error) {
  if (!(alpha > 0 && alpha < 1) || !(p_error > 0 && p_error < 1)) {
    throw Error(fmt::format("entrain: confidence alpha {} and target error {}; valid: each in (0, 1)", alpha, p_error));
  }
  return static_cast<int>(std::ceil(std::log(alpha) / std::log(1 - p_error)));
}

std::vector<int> ProportionalAllocation(int gpus, const std::vector<double>& proportions, int unit) {
  const int n = static_cast<int>(proportions.size());
  const double total = std::accumulate(proportions.begin(), proportions.end(), 0.0);
  const bool negative = std::any_of(proportions.begin(), proportions.end(), [](double p) { return p < 0; });
  if (n == 0 || negative || total <= 0 || unit < 1 || gpus / unit < n) {
    throw Error(
        fmt::format("entrain: {} GPUs in units of {} for {} components (work total {}); valid: at least one "
                    "unit per component and non-negative work, not all zero",
                    gpus, unit, n, total));
  }
  const int units = gpus / unit;
  // Every component one unit; the rest by quota, whole parts first, then the largest remainders.
  const int spare = units - n;
  std::vector<int> count(n, 1);
  std::vector<double> remainder(n);
  int given = 0;
  for (int i = 0; i < n; ++i) {
    const double quota = std::max(0.0, proportions[i] / total * units - 1);
    const int whole = std::min(spare - given, static_cast<int>(std::floor(quota)));
    count[i] += whole;
    given += whole;
    remainder[i] = quota - whole;
  }
  std::vector<int> by(n);
  std::iota(by.begin(), by.end(), 0);
  std::stable_sort(by.begin(), by.end(), [&](int a, int b) { return remainder[a] > remainder[b]; });
  for (int r = 0; given < spare; ++r, ++given) ++count[by[r % n]];
  for (int& c : count) c *= unit;
  return count;
}

ProfilingBatch StableProfilingBatch(const std::function<std::vector<double>(int64_t, Rng&)>& proportions, int gpus,
                                    int unit, double alpha, double p_error, int64_t n0, int64_t max_samples,
                                    uint64_t seed) {
  if (n0 < 1 || max_samples < n0) {
    throw Error(fmt::format("entrain: profiling from {} up to {} samples; valid: 1 <= n0 <= max", n0, max_samples));
  }
  ProfilingBatch out;
  out.trials = ValidationTrials(alpha, p_error);
  Rng rng(seed);
  for (int64_t n = n0; n <= max_samples; n *= 2) {  // Algorithm 2 lines 3-15
    out.tried.push_back(n);
    const std::vector<int> reference = ProportionalAllocation(gpus, proportions(n, rng), unit);
    // Every trial is drawn (no early exit) so the report shows all the
    // allocations a size gives; stability is decided as Algorithm 2 does.
    std::vector<std::vector<int>> seen{reference};
    std::vector<int> count{1};
    for (int t = 0; t < out.trials; ++t) {
      const std::vector<int> a = ProportionalAllocation(gpus, proportions(n, rng), unit);
      const auto at = std::find(seen.begin(), seen.end(), a);
      if (at == seen.end()) {
        seen.push_back(a);
        count.push_back(1);
      } else {
        ++count[at - seen.begin()];
      }
    }
    const bool stable = seen.size() == 1;
    std::vector<int> order(seen.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return count[a] > count[b]; });
    out.seen.emplace_back();
    for (int i : order) out.seen.back().push_back(seen[i]);
    if (stable) {
      out.samples = n;
      out.gpus = reference;
      return out;
    }
  }
  throw Error(
      fmt::format("entrain: no batch of up to {} samples gives a stable allocation over {} trials (last tried "
                  "{}); raise the limit or the GPUs per unit",
                  max_samples, out.trials, out.tried.empty() ? 0 : out.tried.back()));
}

}  // namespace loom
