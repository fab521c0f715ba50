// Rng: the one random source of data generation. std::mt19937_64 is fully
// specified by the standard, and the transforms below are written out (not
// std::*_distribution, whose algorithms vary across libraries), so a seed
// gives the same samples on every platform. Not thread-safe; one per draw.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>

namespace loom {

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  // Seed for stream `stream` of run `seed` (e.g. one per iteration): SplitMix64 mixing.
  static uint64_t Mix(uint64_t seed, uint64_t stream) {
    uint64_t z = seed + 0x9E3779B97F4A7C15ULL * (stream + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }

  // Uniform in [0, 1).
  double Uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Uniform(); }
  // Uniform integer in [lo, hi].
  int64_t UniformInt(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(Uniform() * static_cast<double>(hi - lo + 1));
  }
  // Standard normal by Box-Muller.
  double Normal() {
    double u1 = Uniform();
    double u2 = Uniform();
    return std::sqrt(-2.0 * std::log1p(-u1)) * std::cos(2.0 * M_PI * u2);
  }
  // Log-normal with the given mean (not median) and log-space sigma.
  double LogNormalWithMean(double mean, double sigma) {
    double mu = std::log(mean) - 0.5 * sigma * sigma;
    return std::exp(mu + sigma * Normal());
  }
  // Geometric on {1, 2, ...} with the given mean (>= 1).
  int64_t Geometric(double mean) {
    double p = 1.0 / mean;
    return 1 + static_cast<int64_t>(std::floor(std::log1p(-Uniform()) / std::log1p(-p)));
  }

 private:
  std::mt19937_64 engine_;
};

}  // namespace loom
