#include "loom/algo/matching.h"

#include <fmt/format.h>

#include <functional>

#include "loom/error.h"

namespace loom {

std::vector<int> MaxBipartiteMatching(const std::vector<std::vector<int>>& adjacent, int right) {
  for (size_t l = 0; l < adjacent.size(); ++l) {
    for (int r : adjacent[l]) {
      if (r < 0 || r >= right) {
        throw Error(fmt::format("matching: left vertex {} lists right vertex {}; valid: 0..{}", l, r, right - 1));
      }
    }
  }
  std::vector<int> left_of(right, -1), right_of(adjacent.size(), -1);
  std::vector<char> seen;
  // Finds an augmenting path from left vertex l (Berge): a free right vertex,
  // or one whose partner can move to another.
  std::function<bool(int)> augment = [&](int l) {
    for (int r : adjacent[l]) {
      if (seen[r]) continue;
      seen[r] = 1;
      if (left_of[r] < 0 || augment(left_of[r])) {
        left_of[r] = l;
        right_of[l] = r;
        return true;
      }
    }
    return false;
  };
  for (size_t l = 0; l < adjacent.size(); ++l) {
    seen.assign(right, 0);
    augment(static_cast<int>(l));
  }
  return right_of;
}

}  // namespace loom
