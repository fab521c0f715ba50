#include "loom/cost/quadratic_fit.h"

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <set>

#include "loom/error.h"

namespace loom {

QuadraticCost FitQuadratic(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.size() != y.size()) {
    throw Error(fmt::format("quadratic fit: {} x values but {} y values", x.size(), y.size()));
  }
  if (std::set<double>(x.begin(), x.end()).size() < 3) {
    throw Error("quadratic fit: needs points at 3 or more distinct token counts");
  }
  // Scale x to O(1) so the normal equations stay well conditioned at 16k tokens.
  double scale = 0;
  for (double v : x) {
    scale = std::max(scale, std::abs(v));
  }
  // Normal equations (V^T V) w = V^T y for V = [u^2, u, 1], u = x / scale.
  std::array<std::array<double, 4>, 3> m{};
  for (size_t i = 0; i < x.size(); ++i) {
    double u = x[i] / scale;
    std::array<double, 3> v = {u * u, u, 1.0};
    for (int r = 0; r < 3; ++r) {
      for (int c = 0; c < 3; ++c) {
        m[r][c] += v[r] * v[c];
      }
      m[r][3] += v[r] * y[i];
    }
  }
  // Gaussian elimination with partial pivoting.
  for (int col = 0; col < 3; ++col) {
    int pivot = col;
    for (int r = col + 1; r < 3; ++r) {
      if (std::abs(m[r][col]) > std::abs(m[pivot][col])) {
        pivot = r;
      }
    }
    std::swap(m[col], m[pivot]);
    for (int r = 0; r < 3; ++r) {
      if (r != col) {
        double f = m[r][col] / m[col][col];
        for (int c = col; c < 4; ++c) {
          m[r][c] -= f * m[col][c];
        }
      }
    }
  }
  QuadraticCost q;
  q.a = m[0][3] / m[0][0] / (scale * scale);
  q.b = m[1][3] / m[1][1] / scale;
  q.c = m[2][3] / m[2][2];
  return q;
}

}  // namespace loom
