// Cornstarch (seed 004, chapter 3): `cornstarch` runs with every strategy;
// its ablation and the thesis' Megatron* baseline run when named.
#include "loom/strategies/cornstarch/cornstarch.h"
#include "loom/strategies/registry.h"

namespace loom {
namespace {

const StrategyRegistration kCornstarch({"cornstarch",
                                        "Cornstarch: encoder branches and the LLM as parallel pipelines on their own "
                                        "GPUs or one colocated pipeline, stages balanced by frozen-aware forward + "
                                        "backward time, the LLM's token-balanced context parallelism",
                                        1200,
                                        CornstarchStrategy,
                                        {},
                                        /*variant=*/false,
                                        /*pinnable=*/true});
const StrategyRegistration kEncodersFirst({"megatron-encoders-first",
                                           "Cornstarch's Megatron* baseline: Megatron-LM's grid with the encoders "
                                           "and projectors pinned to the first pipeline stage",
                                           1202,
                                           EncodersFirstStrategy,
                                           {},
                                           /*variant=*/true});
const StrategyRegistration kUnaware({"cornstarch-unaware",
                                     "Cornstarch's ablation: the same pipelines balanced as if every layer trained",
                                     1201,
                                     CornstarchUnawareStrategy,
                                     {},
                                     /*variant=*/true,
                                     /*pinnable=*/true});

}  // namespace
}  // namespace loom
