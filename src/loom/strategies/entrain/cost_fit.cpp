#include "loom/strategies/entrain/cost_fit.h"

#include "loom/cost/token_stats.h"

namespace loom {

const std::vector<double>& ProfileTokenCounts() {
  static const std::vector<double> counts = {64, 256, 1024, 4096, 16384};
  return counts;
}

double CurveTime(const QuadraticCost& q, const TokenStats& t) {
  return t.tokens > 0 ? q.a * t.sum_sq + q.b * t.tokens + q.c * t.sequences : 0.0;
}

QuadraticCost FitLayerCost(const Layer& layer, const BackwardNeeds& needs, const Cluster& cluster,
                           const LayerParallelism& par) {
  std::vector<double> times;
  for (double x : ProfileTokenCounts()) {
    TokenStats one;  // one sequence of x tokens
    one.tokens = x;
    one.sum_sq = x * x;
    one.sequences = 1;
    const LayerTimes lt = PriceLayer(layer, one, needs, cluster, par);
    times.push_back(lt.forward_s + lt.backward_data_s + lt.backward_weight_s);
  }
  return FitQuadratic(ProfileTokenCounts(), times);
}

}  // namespace loom
