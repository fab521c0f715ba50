// Cornstarch (seed 004, chapter 3). Both run only when named until the
// strategy is complete (issue 18: context parallelism in plans, the colocated
// encoder modes, every zoo MLLM checked).
#include "loom/strategies/cornstarch/cornstarch.h"
#include "loom/strategies/registry.h"

namespace loom {
namespace {

const StrategyRegistration kCornstarch({"cornstarch",
                                        "Cornstarch: encoder branches and the LLM as parallel pipelines on their own "
                                        "GPUs, stages balanced by frozen-aware forward + backward time (in progress)",
                                        1200, CornstarchStrategy, {}, /*variant=*/true});
const StrategyRegistration kEncodersFirst({"megatron-encoders-first",
                                           "Cornstarch's Megatron* baseline: Megatron-LM's grid with the encoders "
                                           "and projectors pinned to the first pipeline stage",
                                           1202, EncodersFirstStrategy, {}, /*variant=*/true});
const StrategyRegistration kUnaware({"cornstarch-unaware",
                                     "Cornstarch's ablation: the same pipelines balanced as if every layer trained",
                                     1201, CornstarchUnawareStrategy, {}, /*variant=*/true});

}  // namespace
}  // namespace loom
