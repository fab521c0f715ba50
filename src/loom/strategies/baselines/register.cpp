// The baselines the seed papers compare against (docs/strategies.md).
#include "loom/strategies/baselines/baselines.h"
#include "loom/strategies/mmscale/batch_reorder.h"
#include "loom/strategies/registry.h"

namespace loom {
namespace {

const StrategyRegistration kMegatron({"megatron",
                                      "current Megatron-LM: one pipeline, encoders whole on its first stage with the "
                                      "LLM's first layers, stages balanced by parameters; TP/PP/DP/microbatches/1F1B "
                                      "or interleaved/recompute searched",
                                      0,
                                      MegatronStrategy,
                                      {},
                                      false,
                                      true});
// The baseline of MMScale §7 and PipeWeaver §8: a variant, run when named.
const StrategyRegistration kMegatron2024({"megatron-2024",
                                          "Megatron-LM as MMScale and PipeWeaver ran it (2024): encoders cut into "
                                          "pipeline stages of their own, which current Megatron-LM cannot run",
                                          1001,
                                          Megatron2024Strategy,
                                          {},
                                          true,
                                          true});
const StrategyRegistration kMegatronDp({"megatron-dp",
                                        "Megatron-LM as Mosaic runs it: every module data parallel over all GPUs "
                                        "(tp 1, pp 1), one after another; microbatches and recompute searched",
                                        1000,
                                        MegatronDpStrategy,
                                        {},
                                        true});
const StrategyRegistration kFsdp({"fsdp", "FSDP / ZeRO-3 data parallelism over every GPU", 10, FsdpStrategy});
const StrategyRegistration kDistMm({"distmm",
                                    "DistMM: parallel branches on disjoint whole-GPU sets sized by time, dependent "
                                    "modules in waves",
                                    20, DistMmStrategy});
const StrategyRegistration kOptimus({"optimus",
                                     "Optimus (coarse-grained): encoders data parallel on the backbone's GPUs, "
                                     "scheduled around its pipeline",
                                     30,
                                     OptimusStrategy,
                                     {},
                                     false,
                                     true});
// PipeWeaver §8's Optimus: a variant, run when named.
const StrategyRegistration kOptimusSharedTp({"optimus-shared-tp",
                                             "Optimus as PipeWeaver ran it, inside one Megatron-LM grid: encoders at "
                                             "the backbone's TP, scheduled around its pipeline",
                                             1002,
                                             OptimusSharedTpStrategy,
                                             {},
                                             true,
                                             true});
IterationSchedule DisttrainBatch(const StrategyContext& ctx, const Plan& plan, const Batch& batch, int64_t iteration) {
  return MmscaleScheduleBatch(ctx.model, ctx.cluster, ctx.workload, plan, batch, iteration);
}

const StrategyRegistration kDisttrain({"disttrain",
                                       "DistTrain (Entrain's baseline): MMScale's disaggregated allocation profiled "
                                       "on one sample, its per-batch reordering",
                                       50, DisttrainStrategy, StatelessScheduler(DisttrainBatch), false, true});
// Entrain's comparison: DistTrain without its reordering, a variant run when named.
const StrategyRegistration kDisttrainLoaderOrder({"disttrain-loader-order",
                                                  "DistTrain with microbatches in the loader's order, no per-batch "
                                                  "reordering",
                                                  1003,
                                                  DisttrainLoaderOrderStrategy,
                                                  {},
                                                  true,
                                                  true});
const StrategyRegistration kDip({"dip",
                                 "DIP (Entrain's baseline): encoder and LLM pipelined over the same GPUs, every "
                                 "encoder forward before the LLM, stages from a one-microbatch profile",
                                 60,
                                 DipStrategy,
                                 {},
                                 false,
                                 true});
const StrategyRegistration kNnScaler({"nnscaler",
                                      "nnScaler*: one static 1F1B plan, stages balanced by time on a representative "
                                      "batch",
                                      40,
                                      NnScalerStrategy,
                                      {},
                                      false,
                                      true});

}  // namespace
}  // namespace loom
