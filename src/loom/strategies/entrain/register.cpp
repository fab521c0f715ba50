// Entrain (seed 004 ch. 4).
#include "loom/strategies/entrain/entrain.h"
#include "loom/strategies/registry.h"

namespace loom {
namespace {

const StrategyRegistration kEntrain({"entrain",
                                     "Entrain: encoder and LLM on disjoint GPUs split by macroscopic profiling "
                                     "(Alg. 2) and configuration search (Alg. 3); per batch stratified microbatches, "
                                     "pairwise deferral, split-backward eager 1F1B",
                                     140, EntrainStrategy,
                                     [] { return std::make_unique<EntrainScheduler>(); }});

}  // namespace
}  // namespace loom
