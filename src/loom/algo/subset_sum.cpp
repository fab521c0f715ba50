#include "loom/algo/subset_sum.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>

#include "loom/error.h"

namespace loom {

namespace {

// this |= other << shift over `words` 64-bit words (bits past the end fall off).
void OrShifted(uint64_t* dst, const uint64_t* src, int words, int shift) {
  const int ws = shift >> 6, bs = shift & 63;
  for (int i = words - 1; i >= ws; --i) {
    uint64_t v = src[i - ws] << bs;
    if (bs != 0 && i - ws - 1 >= 0) v |= src[i - ws - 1] >> (64 - bs);
    dst[i] |= v;
  }
}

bool Get(const uint64_t* row, int s) { return (row[s >> 6] >> (s & 63)) & 1; }

}  // namespace

std::vector<int> ClosestSubsetOfSize(const std::vector<double>& values, int k, double target_sum, int grid_steps) {
  const int n = static_cast<int>(values.size());
  if (k < 0 || k > n) {
    throw Error("subset sum: cannot choose " + std::to_string(k) + " of " + std::to_string(n) + " values");
  }
  if (grid_steps < 1) throw Error("subset sum: grid_steps must be >= 1");
  if (k == 0) return {};
  if (k == n) {
    std::vector<int> all(n);
    for (int i = 0; i < n; ++i) all[i] = i;
    return all;
  }
  std::vector<double> sorted = values;
  std::sort(sorted.begin(), sorted.end(), std::greater<>());
  double span = 0;
  for (int i = 0; i < k; ++i) span += sorted[i];
  const double step = span > 0 ? span / grid_steps : 1.0;
  // Rounding can lift a sum of k values up to k/2 steps past the span.
  const int bits = grid_steps + k + 1;
  std::vector<int> units(n);
  for (int i = 0; i < n; ++i) {
    units[i] = std::min(grid_steps, static_cast<int>(std::lround(std::max(0.0, values[i]) / step)));
  }
  // reach(i, c): bitset of grid sums of c of the first i values, one flat
  // buffer (kept per i to walk back).
  const int words = (bits + 63) / 64;
  std::vector<uint64_t> reach(static_cast<size_t>(n + 1) * (k + 1) * words, 0);
  auto row = [&](int i, int c) { return reach.data() + (static_cast<size_t>(i) * (k + 1) + c) * words; };
  row(0, 0)[0] = 1;
  for (int i = 1; i <= n; ++i) {
    std::copy(row(i - 1, 0), row(i - 1, 0) + static_cast<size_t>(k + 1) * words, row(i, 0));
    const int lo = std::max(1, k - (n - i));  // counts that can still end at k
    for (int c = std::min(i, k); c >= lo; --c) OrShifted(row(i, c), row(i - 1, c - 1), words, units[i - 1]);
  }
  const double target_units = target_sum / step;
  int best = -1;
  double best_gap = 0;
  for (int s = 0; s < bits; ++s) {
    if (!Get(row(n, k), s)) continue;
    const double gap = std::abs(s - target_units);
    if (best < 0 || gap < best_gap) {
      best = s;
      best_gap = gap;
    }
  }
  std::vector<int> chosen;
  int c = k, s = best;
  for (int i = n; i >= 1 && c > 0; --i) {
    if (Get(row(i - 1, c), s)) continue;  // reachable without value i-1
    chosen.push_back(i - 1);
    s -= units[i - 1];
    --c;
  }
  std::reverse(chosen.begin(), chosen.end());
  return chosen;
}

std::vector<int> ClosestSubset(const std::vector<double>& values, double target_sum, int grid_steps) {
  if (grid_steps < 1) throw Error("subset sum: grid_steps must be >= 1");
  const int n = static_cast<int>(values.size());
  double total = 0;
  bool integers = true;
  for (int i = 0; i < n; ++i) {
    if (values[i] < 0) throw Error("subset sum: value " + std::to_string(i) + " is negative; valid: >= 0");
    total += values[i];
    integers = integers && values[i] == std::floor(values[i]);
  }
  if (n == 0 || total <= 0) return {};
  const double step = integers ? std::max(1.0, std::ceil(total / grid_steps)) : total / grid_steps;
  std::vector<int> units(n);
  int span = 0;
  for (int i = 0; i < n; ++i) {
    units[i] = static_cast<int>(std::lround(values[i] / step));
    span += units[i];
  }
  // from[s]: the value that first reached grid sum s (items in order, so
  // s - units[from[s]] was reached by earlier values only). The sums value i
  // first reaches are (reached << units[i]) & ~reached, 64 sums a word.
  std::vector<int> from(span + 1, -2);
  from[0] = -1;
  const int words = span / 64 + 1;
  std::vector<uint64_t> reached(words, 0), shifted(words);
  reached[0] = 1;
  for (int i = 0; i < n; ++i) {
    if (units[i] == 0) continue;
    std::fill(shifted.begin(), shifted.end(), 0);
    OrShifted(shifted.data(), reached.data(), words, units[i]);
    for (int w = 0; w < words; ++w) {
      uint64_t fresh = shifted[w] & ~reached[w];
      reached[w] |= fresh;
      while (fresh != 0) {
        const int s = w * 64 + std::countr_zero(fresh);
        fresh &= fresh - 1;
        if (s <= span) from[s] = i;
      }
    }
  }
  const double target_units = target_sum / step;
  int best = 0;
  for (int s = 1; s <= span; ++s) {
    if (from[s] != -2 && std::abs(s - target_units) < std::abs(best - target_units)) best = s;
  }
  std::vector<int> chosen;
  for (int s = best; s > 0; s -= units[from[s]]) chosen.push_back(from[s]);
  std::sort(chosen.begin(), chosen.end());
  return chosen;
}

}  // namespace loom
