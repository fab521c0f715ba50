#include "loom/cost/module_summary.h"

#include <algorithm>

#include "loom/cost/layer_work.h"
#include "loom/cost/memory.h"

namespace loom {

int64_t ModelParams(const Model& model) {
  int64_t n = 0;
  for (const auto& m : model.modules) {
    for (const auto& l : m.layers) {
      n += LayerParams(l);
    }
  }
  return n;
}

namespace {
// cost/memory.h's ModelState of the whole model at dp 1.
ModelStateBytes WholeModelState(const Model& model, Precision precision) {
  double trainable = 0, frozen = 0;
  for (const auto& m : model.modules) {
    for (const auto& l : m.layers) (m.frozen || l.frozen ? frozen : trainable) += static_cast<double>(LayerParams(l));
  }
  return ModelState(trainable, frozen, 1, 1, precision);
}
}  // namespace

double ModelStateTotalBytes(const Model& model, Precision precision) {
  return WholeModelState(model, precision).total();
}

double ModelCheckpointBytes(const Model& model, Precision precision) {
  const ModelStateBytes s = WholeModelState(model, precision);
  return s.weights + s.optimizer;
}

std::vector<ModuleSummary> SummarizeModules(const Model& model, const std::vector<Sample>& samples) {
  std::vector<TokenStats> tokens = CountModuleTokens(model, samples);
  std::vector<ModuleSummary> out;
  for (size_t i = 0; i < model.modules.size(); ++i) {
    const Module& m = model.modules[i];
    ModuleSummary s;
    s.name = m.name;
    s.tokens = tokens[i];
    for (const auto& l : m.layers) {
      int64_t p = LayerParams(l);
      s.params += p;
      s.trainable_params += l.frozen ? 0 : p;
      s.hidden = std::max(s.hidden, l.hidden);
      LayerWork w = EstimateLayerWork(l, tokens[i], 1);
      s.fwd_flops += w.Flops(Phase::kForward);
      s.fwd_bytes += w.Bytes(Phase::kForward);
    }
    out.push_back(s);
  }
  return out;
}

}  // namespace loom
