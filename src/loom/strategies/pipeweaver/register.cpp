// PipeWeaver (seed 003) and its Table 5 ablation levels.
#include "loom/strategies/pipeweaver/pipeweaver.h"
#include "loom/strategies/registry.h"

namespace loom {
namespace {

const StrategyRegistration kPipeweaver({"pipeweaver",
                                        "PipeWeaver: modality-aware layout (P x K_i chunks per module), per batch "
                                        "sub-microbatches, MCTS-ranked dual-queue interleaving and per-layer "
                                        "recomputation by ILP (CBC)",
                                        110, PipeweaverStrategy, StatelessScheduler(PipeweaverBatch), false, true});
const StrategyRegistration kPartition({"pipeweaver-partition",
                                       "PipeWeaver ablation: the modality-aware layout with its static interleaved "
                                       "schedule",
                                       1010,
                                       PipeweaverPartitionStrategy,
                                       {},
                                       true,
                                       true});
const StrategyRegistration kInterleave({"pipeweaver-interleave",
                                        "PipeWeaver ablation: + sub-microbatches and dual-queue interleaving, default "
                                        "ranking",
                                        1011, PipeweaverInterleaveStrategy,
                                        StatelessScheduler(PipeweaverInterleaveBatch), true, true});
const StrategyRegistration kInterleaveRc({"pipeweaver-interleave-rc",
                                          "PipeWeaver ablation: interleaving from the static plan's recomputation "
                                          "(the paper's Table 5 bookkeeping), default ranking",
                                          1013, PipeweaverInterleaveRcStrategy,
                                          StatelessScheduler(PipeweaverInterleaveRcBatch), true, true});
const StrategyRegistration kTuneRc({"pipeweaver-tune-rc",
                                    "PipeWeaver ablation: interleaving from the static plan's recomputation, then "
                                    "layer tuning",
                                    1014, PipeweaverTuneRcStrategy, StatelessScheduler(PipeweaverTuneRcBatch), true,
                                    true});
const StrategyRegistration kRank({"pipeweaver-rank", "PipeWeaver ablation: + MCTS ranking, no layer tuning", 1012,
                                  PipeweaverRankStrategy, StatelessScheduler(PipeweaverRankBatch), true, true});

}  // namespace
}  // namespace loom
