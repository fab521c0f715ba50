// The baseline strategies the seed papers compare against (docs/strategies.md).
#pragma once

#include "loom/strategies/strategy.h"

namespace loom {

StrategyResult MegatronStrategy(const StrategyContext& ctx);
StrategyResult MegatronDpStrategy(const StrategyContext& ctx);  // Mosaic's baseline: DP only
StrategyResult FsdpStrategy(const StrategyContext& ctx);
StrategyResult DistMmStrategy(const StrategyContext& ctx);
StrategyResult OptimusStrategy(const StrategyContext& ctx);
StrategyResult NnScalerStrategy(const StrategyContext& ctx);

}  // namespace loom
