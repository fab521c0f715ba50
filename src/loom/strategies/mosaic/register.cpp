// Mosaic (seed 000) and its §5.3 ablations.
#include "loom/strategies/mosaic/mosaic.h"
#include "loom/strategies/registry.h"

namespace loom {
namespace {

const StrategyRegistration kMosaic({"mosaic",
                                    "Mosaic: temporal-spatial multiplexing; modules share GPUs with SM quotas (green "
                                    "contexts), stages by GAHC (Alg. 1), StageEval by binary search + CBC",
                                    120,
                                    MosaicStrategy,
                                    {},
                                    false});
const StrategyRegistration kSpindle({"spindle",
                                     "Spindle (ASPLOS'25) as Mosaic models it: waves of modules on disjoint whole-GPU "
                                     "sets (no SM sharing), packed by Mosaic's solver; module slicing not modelled",
                                     60,
                                     SpindleStrategy,
                                     {},
                                     false});
const StrategyRegistration kNoInterference({"mosaic-nointerference",
                                            "Mosaic ablation: scaling surfaces only (no interference, no host floor)",
                                            1020,
                                            MosaicNoInterferenceStrategy,
                                            {},
                                            true});
const StrategyRegistration kAdditive(
    {"mosaic-additive", "Mosaic ablation: Eq. 8 without its product term", 1021, MosaicAdditiveStrategy, {}, true});
const StrategyRegistration kNoCache(
    {"mosaic-nocache", "Mosaic ablation: StageEval without result caching", 1022, MosaicNoCacheStrategy, {}, true});
const StrategyRegistration kNoPrune(
    {"mosaic-noprune", "Mosaic ablation: GAHC without early pruning", 1023, MosaicNoPruneStrategy, {}, true});
const StrategyRegistration kG30(
    {"mosaic-g30", "Mosaic ablation: SM quotas at 30% granularity", 1024, MosaicGranularity30Strategy, {}, true});
const StrategyRegistration kG20(
    {"mosaic-g20", "Mosaic ablation: SM quotas at 20% granularity", 1025, MosaicGranularity20Strategy, {}, true});
const StrategyRegistration kG5(
    {"mosaic-g5", "Mosaic ablation: SM quotas at 5% granularity", 1026, MosaicGranularity5Strategy, {}, true});

}  // namespace
}  // namespace loom
