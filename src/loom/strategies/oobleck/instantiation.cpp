#include "loom/strategies/oobleck/instantiation.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "loom/error.h"

namespace loom::oobleck {

std::vector<std::vector<int>> EnumerateInstantiations(int nodes, const std::vector<int>& sizes, int64_t limit) {
  const int p = static_cast<int>(sizes.size());
  // table[q][n]: X(q, n) over the first q sizes. One row at a time (Eq. 2.5
  // reads only row q - 1 and row q), O(N p) cells.
  std::vector<std::vector<std::vector<int>>> prev(nodes + 1), cur(nodes + 1);
  prev[0] = {std::vector<int>(p, 0)};
  int64_t cells = 1;
  for (int q = 1; q <= p; ++q) {
    const int s = sizes[q - 1];
    for (int n = 0; n <= nodes; ++n) {
      cur[n] = prev[n];  // X(q - 1, n)
      if (n >= s) {
        for (std::vector<int> v : cur[n - s]) {  // θ(X(q, n - s), q)
          ++v[q - 1];
          cur[n].push_back(std::move(v));
          if (++cells > limit) {
            throw Error(
                fmt::format("oobleck: more than {} ways to instantiate {} nodes from {} templates; plan a "
                            "larger n0 or fewer nodes",
                            limit, nodes, p));
          }
        }
      }
    }
    std::swap(prev, cur);
  }
  return prev[nodes];
}

int64_t EnumerationSize(int nodes, const std::vector<int>& sizes, int64_t cap) {
  if (nodes < 0) return 1;
  // ways[n]: |X(q, n)| over the sizes so far (Eq. 2.5 on counts); each
  // θ(X(q, n - s)) appends ways[n - s] vectors, which is what the
  // enumeration counts.
  std::vector<int64_t> ways(nodes + 1, 0);
  ways[0] = 1;
  int64_t built = 1;
  for (int s : sizes) {
    if (s < 1) continue;
    for (int n = s; n <= nodes; ++n) {
      built = std::min(cap, built + ways[n - s]);
      ways[n] = std::min(cap, ways[n] + ways[n - s]);
    }
  }
  return built;
}

std::vector<std::vector<int>> FeasibleInstantiations(int nodes, const TemplateSizes& templates, int64_t limit) {
  std::vector<std::vector<int>> out;
  for (auto& x : EnumerateInstantiations(nodes, templates.nodes, limit)) {
    if (std::accumulate(x.begin(), x.end(), 0) >= templates.fault_tolerance + 1) out.push_back(std::move(x));
  }
  return out;
}

namespace {

int Gcd(const std::vector<int>& x) {
  int g = 0;
  for (int v : x) g = std::gcd(g, v);
  return g;
}

bool Splits(const std::vector<int>& x, int total) {
  const int pipelines = std::accumulate(x.begin(), x.end(), 0);
  const int g = Gcd(x);
  return g > 0 && total >= pipelines && total % g == 0;
}

}  // namespace

std::pair<int, int> NearestDistributable(const std::vector<int>& x, int total) {
  int up = std::max(total, 1), down = total;
  while (!Splits(x, up)) ++up;
  while (down > 0 && !Splits(x, down)) --down;
  return {up, down};
}

BatchDistribution DistributeBatch(const std::vector<int>& x, const std::vector<double>& microbatch_time_s,
                                  int total_microbatches) {
  if (x.size() != microbatch_time_s.size()) throw Error("oobleck: internal: one time per template");
  if (!Splits(x, total_microbatches)) {
    const auto [up, down] = NearestDistributable(x, total_microbatches);
    throw Error(
        fmt::format("oobleck: {} microbatches do not split over the pipelines ({} in all, counts {}): the "
                    "nearest totals that do are {}{}",
                    total_microbatches, std::accumulate(x.begin(), x.end(), 0), fmt::join(x, ","), up,
                    down > 0 ? fmt::format(" and {}", down) : ""));
  }
  std::vector<int> used;
  for (size_t j = 0; j < x.size(); ++j) {
    if (x[j] > 0) {
      if (!(microbatch_time_s[j] > 0)) throw Error("oobleck: a used template needs a positive microbatch time");
      used.push_back(static_cast<int>(j));
    }
  }
  const int pipelines = std::accumulate(x.begin(), x.end(), 0);
  // Continuous optimum: every pipeline's N T equal to c, Σ x_j c / T_j = M.
  double inv = 0;
  for (int j : used) inv += x[j] / microbatch_time_s[j];
  const double c = total_microbatches / inv;
  auto evaluate = [&](const std::vector<int>& n, BatchDistribution* out) {
    double sum = 0, sq = 0, top = 0;
    for (int j : used) {
      const double y = n[j] * microbatch_time_s[j];
      sum += x[j] * y;
      sq += x[j] * y * y;
      top = std::max(top, y);
    }
    out->objective = std::max(0.0, sq - sum * sum / pipelines);
    out->makespan_s = top;
    out->microbatches = n;
  };
  auto better = [](const BatchDistribution& a, const BatchDistribution& b) {
    if (a.objective < b.objective * (1 - 1e-12) - 1e-18) return true;
    if (b.objective < a.objective * (1 - 1e-12) - 1e-18) return false;
    if (a.makespan_s != b.makespan_s) return a.makespan_s < b.makespan_s;
    return a.microbatches < b.microbatches;
  };
  // Exact search in windows around c / T_j, w wide, widened (doubling) until
  // nothing outside can beat the best inside. A vector with some template
  // outside its window has |y_j - c| > w T_j (y = N T); since Σ x y / T = M
  // puts some other y_k on the other side of c, its objective is at least
  // x_j x_k / (x_j + x_k) (y_j - y_k)² >= min x / 2 · (w min T)².
  BatchDistribution best;
  bool found = false;
  for (int w = 1;; w *= 2) {
    std::vector<int> lo(x.size(), 0), hi(x.size(), 0), n(x.size(), 0);
    for (int j : used) {
      const double centre = c / microbatch_time_s[j];
      lo[j] = std::max(1, static_cast<int>(std::floor(centre)) - w);
      hi[j] = std::max(lo[j], static_cast<int>(std::ceil(centre)) + w);
    }
    std::function<void(size_t, int)> rec = [&](size_t k, int left) {
      if (k + 1 == used.size()) {
        const int j = used[k];
        if (left % x[j] != 0) return;
        const int v = left / x[j];  // the last template takes what is left, in its window or not
        if (v < 1) return;
        n[j] = v;
        BatchDistribution d;
        evaluate(n, &d);
        if (!found || better(d, best)) {
          best = d;
          found = true;
        }
        return;
      }
      const int j = used[k];
      for (int v = lo[j]; v <= hi[j] && v * x[j] <= left; ++v) {
        n[j] = v;
        rec(k + 1, left - v * x[j]);
      }
    };
    rec(0, total_microbatches);
    double tmin = 1e300;
    int xmin = pipelines;
    for (int j : used) {
      tmin = std::min(tmin, microbatch_time_s[j]);
      xmin = std::min(xmin, x[j]);
    }
    const double bound = xmin * std::pow(w * tmin, 2) * 0.5;
    const bool covered = [&] {  // every template's window already spans all its feasible counts
      for (int j : used) {
        if (lo[j] > 1 || hi[j] * x[j] < total_microbatches) return false;
      }
      return true;
    }();
    if ((found && bound > best.objective) || covered) break;
  }
  if (!found) throw Error("oobleck: internal: no batch distribution found");
  return best;
}

std::string DescribeInstantiation(const std::vector<int>& x, const std::vector<int>& sizes) {
  std::string s;
  for (size_t j = 0; j < x.size(); ++j) {
    if (x[j] == 0) continue;
    s += fmt::format("{}{} x {} node{}", s.empty() ? "" : " + ", x[j], sizes[j], sizes[j] == 1 ? "" : "s");
  }
  return s;
}

}  // namespace loom::oobleck
