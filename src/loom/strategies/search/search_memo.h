// What a strategy's search computes over and over and keeps instead: pure
// functions of its context's model, cluster and representative batch (the
// batch's per-module tokens, per-layer balance weights, stage prices). A
// cached value is always the value the function returns; the memo only saves
// the time. Shared by a context's copies and, in a comparison, by every
// strategy on the same model, cluster and batch; not thread-safe.
#pragma once

#include <map>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "loom/cost/token_stats.h"
#include "loom/sim/price_execution.h"

namespace loom {

struct SearchMemo {
  // Stage prices of candidate plans on the representative batch.
  PricingMemo pricing;
  // CountModuleTokens of the representative batch.
  std::optional<std::vector<TokenStats>> representative_tokens;
  // LayerWeights by (layers, balance, tp).
  std::map<std::tuple<std::vector<std::pair<int, int>>, int, int>, std::vector<double>> layer_weights;
};

}  // namespace loom
