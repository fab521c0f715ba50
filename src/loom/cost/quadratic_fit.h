// Entrain §4.4.1's per-layer cost curve T(x) = a x^2 + b x + c in the token
// count x, fitted by ordinary least squares to profiled points (attention
// makes the x^2 term, linear layers the x term, launch overhead the constant).
#pragma once

#include <vector>

namespace loom {

struct QuadraticCost {
  double a = 0, b = 0, c = 0;
  double operator()(double x) const { return (a * x + b) * x + c; }
};

// Least-squares fit. Throws loom::Error when fewer than 3 distinct x are given
// or the sizes differ.
QuadraticCost FitQuadratic(const std::vector<double>& x, const std::vector<double>& y);

}  // namespace loom
