// The baseline strategies the seed papers compare against (docs/strategies.md).
#pragma once

#include "loom/strategies/strategy.h"

namespace loom {

StrategyResult MegatronStrategy(const StrategyContext& ctx);      // current Megatron-LM: encoders on stage 0
StrategyResult Megatron2024Strategy(const StrategyContext& ctx);  // MMScale's and PipeWeaver's: encoder stages
StrategyResult MegatronDpStrategy(const StrategyContext& ctx);  // Mosaic's baseline: DP only
StrategyResult FsdpStrategy(const StrategyContext& ctx);
StrategyResult DistMmStrategy(const StrategyContext& ctx);
StrategyResult OptimusStrategy(const StrategyContext& ctx);
// Optimus as PipeWeaver §8 ran it, inside PipeWeaver's Megatron-LM runtime: the
// encoders at the backbone's TP (data parallel or pipelined over its stages),
// never at TP 1 of their own.
StrategyResult OptimusSharedTpStrategy(const StrategyContext& ctx);
StrategyResult NnScalerStrategy(const StrategyContext& ctx);
// Entrain's baselines (seed 004 §4.7): DistTrain (MMScale's allocation on a
// one-sample profile, its reordering per batch) and DIP (encoder and LLM
// co-located in two phases over every group, profiled on one microbatch).
StrategyResult DisttrainStrategy(const StrategyContext& ctx);
// DistTrain with microbatches in the loader's order (no per-batch reordering):
// Entrain's DistTrain as the thesis measured it (docs/results/entrain.md).
StrategyResult DisttrainLoaderOrderStrategy(const StrategyContext& ctx);
StrategyResult DipStrategy(const StrategyContext& ctx);

// Every module data parallel on every GPU (TP 1, PP 1) at ZeRO `zero_stage`;
// searched: accumulation steps and recomputation. FSDP and megatron-dp.
StrategyResult DataParallelOnAllGpus(const StrategyContext& ctx, const std::string& name, int zero_stage,
                                     const std::string& searched);

}  // namespace loom
