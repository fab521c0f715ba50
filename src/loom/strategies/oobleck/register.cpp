// Oobleck (seed 004, chapter 2).
#include "loom/strategies/oobleck/oobleck.h"
#include "loom/strategies/registry.h"

namespace loom {
namespace {

const StrategyRegistration kOobleck({"oobleck",
                                     "Oobleck: pipeline templates of n0 .. N - f n0 nodes by divide and conquer, "
                                     "instantiated with >= f + 1 heterogeneous pipelines (--fault-tolerance F), "
                                     "batch by Eq. 2.6, layer-wise gradient sync",
                                     115,
                                     OobleckStrategy,
                                     {}});

}  // namespace
}  // namespace loom
