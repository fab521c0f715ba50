// Entrain's per-sample workloads (seed 004 §4.4.1: "from the cost model plus
// sample metadata"): a sample's encoder work and LLM work in seconds, from
// every layer's fitted curve T(x) = a x^2 + b x + c (cost_fit.h) and the
// sample's token counts. Summed over a module's sequences the curve needs
// only the module's TokenStats: a sum_sq + b tokens + c sequences. The
// encoder side is every module upstream of the backbone (the thesis merges
// the encoders into one); the LLM side the backbone and anything after it.
#pragma once

#include <vector>

#include "loom/cost/quadratic_fit.h"
#include "loom/cost/token_stats.h"
#include "loom/data/sample.h"
#include "loom/spec/cluster.h"
#include "loom/spec/model.h"
#include "loom/strategies/entrain/stratified_assignment.h"

namespace loom {

// The fitted curve of every layer, curves[module][layer], each module at its TP
// (`tp[module]`, 1 where missing; a module whose heads do not divide it shares
// sequences instead, as the pricing does).
struct LayerCurves {
  std::vector<std::vector<QuadraticCost>> curves;
  std::vector<bool> encoder;  // per module: on the encoder side
};
LayerCurves FitModelCurves(const Model& model, const Cluster& cluster, const std::vector<int>& tp);

SampleWork SampleWorkOf(const Model& model, const LayerCurves& curves, const Sample& sample);
// The same from the sample's CountModuleTokens (which do not depend on the curves' TP).
SampleWork SampleWorkOf(const LayerCurves& curves, const std::vector<TokenStats>& tokens);

}  // namespace loom
