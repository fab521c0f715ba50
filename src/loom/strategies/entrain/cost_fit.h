// Entrain's hardware-calibrated cost model (seed 004 §4.4.1): each layer's
// time as a quadratic in its token count (cost/quadratic_fit.h), fitted by
// least squares to the layer's time at x in {64, 256, 1K, 4K, 16K} tokens of
// one sequence. Loom samples its own cost model there (the measured
// profile where the GPU has one, else the roofline), at the layer's TP and
// CP, forward plus backward as the layer trains; Entrain then prices
// per-sample work from token counts without calling it.
#pragma once

#include <vector>

#include "loom/cost/frozen.h"
#include "loom/cost/layer_pricing.h"
#include "loom/cost/quadratic_fit.h"
#include "loom/cost/token_stats.h"
#include "loom/spec/cluster.h"
#include "loom/spec/layer.h"

namespace loom {

// The token counts Entrain profiles at.
const std::vector<double>& ProfileTokenCounts();

// A fitted curve summed over the sequences `t` describes:
// a sum_sq + b tokens + c sequences (0 when there are no tokens).
double CurveTime(const QuadraticCost& q, const TokenStats& t);

// A layer's forward + backward time fitted over ProfileTokenCounts().
QuadraticCost FitLayerCost(const Layer& layer, const BackwardNeeds& needs, const Cluster& cluster,
                           const LayerParallelism& par);

}  // namespace loom
