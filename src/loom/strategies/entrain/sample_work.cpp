#include "loom/strategies/entrain/sample_work.h"

#include <algorithm>

#include "loom/cost/frozen.h"
#include "loom/cost/token_stats.h"
#include "loom/strategies/entrain/cost_fit.h"
#include "loom/strategies/search/module_waves.h"

namespace loom {

LayerCurves FitModelCurves(const Model& model, const Cluster& cluster, const std::vector<int>& tp) {
  LayerCurves out;
  const auto needs = ComputeBackwardNeeds(model);
  const ModuleWaves waves = SplitWaves(model);
  for (size_t m = 0; m < model.modules.size(); ++m) {
    LayerParallelism par;
    par.tp = m < tp.size() ? std::max(1, tp[m]) : 1;
    par.split = SplitsOverTensorParallel(model.modules[m], par.tp);
    std::vector<QuadraticCost> layers;
    for (size_t l = 0; l < model.modules[m].layers.size(); ++l) {
      layers.push_back(FitLayerCost(model.modules[m].layers[l], needs[m][l], cluster, par));
    }
    out.curves.push_back(std::move(layers));
    out.encoder.push_back(waves.IsUpstream(model.modules[m].name));
  }
  return out;
}

SampleWork SampleWorkOf(const Model& model, const LayerCurves& curves, const Sample& sample) {
  return SampleWorkOf(curves, CountModuleTokens(model, sample));
}

SampleWork SampleWorkOf(const LayerCurves& curves, const std::vector<TokenStats>& tokens) {
  SampleWork w;
  for (size_t m = 0; m < tokens.size(); ++m) {
    const TokenStats& t = tokens[m];
    if (t.tokens <= 0) continue;
    double s = 0;
    for (const QuadraticCost& q : curves.curves[m]) s += CurveTime(q, t);
    (curves.encoder[m] ? w.encoder : w.llm) += s;
  }
  return w;
}

}  // namespace loom
