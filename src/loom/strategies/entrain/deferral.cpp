#include "loom/strategies/entrain/deferral.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "loom/algo/matching.h"
#include "loom/algo/subset_sum.h"
#include "loom/error.h"

namespace loom {

DeferralPlan PairwiseDeferral(const std::vector<std::vector<int>>& microbatches, const std::vector<double>& llm_work) {
  const int K = static_cast<int>(microbatches.size());
  std::vector<double> load(K, 0.0);
  for (int m = 0; m < K; ++m) {
    for (int s : microbatches[m]) {
      if (s < 0 || s >= static_cast<int>(llm_work.size()) || llm_work[s] < 0) {
        throw Error(fmt::format("entrain: microbatch {} holds sample {}; valid: 0..{} with LLM work >= 0", m, s,
                                static_cast<int>(llm_work.size()) - 1));
      }
      load[m] += llm_work[s];
    }
  }
  DeferralPlan plan;
  plan.llm_load = load;
  if (K == 0) return plan;
  // Line 7-8: by descending LLM load (ties: index order), top and bottom halves.
  std::vector<int> by_load(K);
  std::iota(by_load.begin(), by_load.end(), 0);
  std::stable_sort(by_load.begin(), by_load.end(), [&](int a, int b) { return load[a] > load[b]; });
  const int half = K / 2;
  const std::vector<int> ol(by_load.begin(), by_load.begin() + half), ul(by_load.end() - half, by_load.end());
  if (K % 2 == 1) plan.unpaired = by_load[half];
  // Lines 9-11: each pair's deferral set and bottleneck (Eq. 4.3).
  std::vector<std::vector<std::vector<int>>> deferred(half, std::vector<std::vector<int>>(half));
  std::vector<std::vector<double>> V(half, std::vector<double>(half));
  std::vector<double> candidates;
  for (int a = 0; a < half; ++a) {
    const int i = ol[a];
    std::vector<double> works;
    for (int s : microbatches[i]) works.push_back(llm_work[s]);
    for (int b = 0; b < half; ++b) {
      const int j = ul[b];
      const double delta = (load[i] - load[j]) / 2;
      double d = 0;
      if (delta > 0) {
        for (int idx : ClosestSubset(works, delta)) {
          deferred[a][b].push_back(microbatches[i][idx]);
          d += works[idx];
        }
      }
      V[a][b] = std::max(load[i] - d, load[j] + d);
      candidates.push_back(V[a][b]);
    }
    candidates.push_back(load[i]);  // L_i
  }
  // Line 13: BottleneckMatch. T must also hold the unpaired microbatch.
  const double floor_s = plan.unpaired >= 0 ? load[plan.unpaired] : 0.0;
  if (plan.unpaired >= 0) candidates.push_back(floor_s);
  std::sort(candidates.begin(), candidates.end());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  candidates.erase(std::remove_if(candidates.begin(), candidates.end(), [&](double t) { return t < floor_s; }),
                   candidates.end());
  // Matches the critical overloaded microbatches (L_i > T) over edges V_ij <= T.
  auto match = [&](double T, std::vector<int>* partner) {
    std::vector<std::vector<int>> adjacent(half);
    for (int a = 0; a < half; ++a) {
      if (load[ol[a]] <= T) continue;
      for (int b = 0; b < half; ++b) {
        if (V[a][b] <= T) adjacent[a].push_back(b);
      }
    }
    *partner = MaxBipartiteMatching(adjacent, half);
    for (int a = 0; a < half; ++a) {
      if (load[ol[a]] > T && (*partner)[a] < 0) return false;
    }
    return true;
  };
  int lo = 0, hi = static_cast<int>(candidates.size()) - 1;  // the largest candidate is always feasible
  std::vector<int> partner;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (match(candidates[mid], &partner)) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  plan.bottleneck = candidates[lo];
  match(plan.bottleneck, &partner);
  // Non-critical overloaded microbatches take the remaining underloaded ones in order, deferring nothing.
  std::vector<char> taken(half, 0);
  for (int a = 0; a < half; ++a) {
    if (partner[a] >= 0) taken[partner[a]] = 1;
  }
  for (int a = 0, b = 0; a < half; ++a) {
    if (partner[a] >= 0) continue;
    while (taken[b]) ++b;
    partner[a] = b;
    taken[b] = 1;
  }
  // Lines 14-15: interleaved pairs by descending overloaded load; the LLM loads after deferral.
  for (int a = 0; a < half; ++a) {
    DeferralPair p{ol[a], ul[partner[a]], {}};
    if (load[ol[a]] > plan.bottleneck) p.deferred = deferred[a][partner[a]];
    double d = 0;
    for (int s : p.deferred) d += llm_work[s];
    plan.llm_load[p.overloaded] -= d;
    plan.llm_load[p.underloaded] += d;
    plan.order.push_back(p.overloaded);
    plan.order.push_back(p.underloaded);
    plan.pairs.push_back(std::move(p));
  }
  if (plan.unpaired >= 0) plan.order.push_back(plan.unpaired);
  return plan;
}

}  // namespace loom
