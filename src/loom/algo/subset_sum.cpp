#include "loom/algo/subset_sum.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>

#include "loom/error.h"

namespace loom {

namespace {

// A fixed-width bitset over grid sums: bit s set = sum s reachable.
struct Bits {
  std::vector<uint64_t> w;
  explicit Bits(int bits = 0) : w((bits + 63) / 64, 0) {}
  bool get(int s) const { return (w[s >> 6] >> (s & 63)) & 1; }
  void set(int s) { w[s >> 6] |= uint64_t{1} << (s & 63); }
  // this |= other << shift (bits past the end fall off)
  void or_shifted(const Bits& o, int shift) {
    const int words = static_cast<int>(w.size());
    const int ws = shift >> 6, bs = shift & 63;
    for (int i = words - 1; i >= ws; --i) {
      uint64_t v = o.w[i - ws] << bs;
      if (bs != 0 && i - ws - 1 >= 0) v |= o.w[i - ws - 1] >> (64 - bs);
      w[i] |= v;
    }
  }
};

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
  const int bits = grid_steps + 1;
  std::vector<int> units(n);
  for (int i = 0; i < n; ++i) {
    units[i] = std::min(grid_steps, static_cast<int>(std::lround(std::max(0.0, values[i]) / step)));
  }
  // reach[i][c]: sums of c of the first i values. Kept per i to walk back.
  std::vector<std::vector<Bits>> reach(n + 1, std::vector<Bits>(k + 1, Bits(bits)));
  reach[0][0].set(0);
  for (int i = 1; i <= n; ++i) {
    reach[i] = reach[i - 1];
    const int lo = std::max(1, k - (n - i));  // counts that can still end at k
    for (int c = std::min(i, k); c >= lo; --c) reach[i][c].or_shifted(reach[i - 1][c - 1], units[i - 1]);
  }
  const double target_units = target_sum / step;
  int best = -1;
  double best_gap = 0;
  for (int s = 0; s < bits; ++s) {
    if (!reach[n][k].get(s)) continue;
    const double gap = std::abs(s - target_units);
    if (best < 0 || gap < best_gap) {
      best = s;
      best_gap = gap;
    }
  }
  std::vector<int> chosen;
  int c = k, s = best;
  for (int i = n; i >= 1 && c > 0; --i) {
    if (reach[i - 1][c].get(s)) continue;  // reachable without value i-1
    chosen.push_back(i - 1);
    s -= units[i - 1];
    --c;
  }
  std::reverse(chosen.begin(), chosen.end());
  return chosen;
}

}  // namespace loom
