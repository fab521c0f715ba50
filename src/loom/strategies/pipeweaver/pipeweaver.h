// PipeWeaver (seed 003, notes/pipeweaver.md): a static modality-aware layout
// (partitioner.h) and, per batch, a woven pipeline: modality sub-microbatches,
// an MCTS-ranked dual-queue interleaving and per-layer recomputation tuned by
// an ILP. The per-batch schedule is simulated in full (the pipeline validator
// runs first) and kept only when it beats the static layout on that batch.
#pragma once

#include "loom/strategies/pipeweaver/layer_tuning.h"
#include "loom/strategies/pipeweaver/ranking.h"
#include "loom/strategies/strategy.h"

namespace loom {

// Which levels of the per-batch search run (the ablation of paper Table 5).
struct PipeweaverOptions {
  bool weave = true;  // sub-microbatches + dual-queue interleaving; false: the static layout only
  bool rank = true;   // MCTS ranking; false: the default (microbatch-major) ranking
  bool tune = true;   // per-layer recomputation by the ILP
  // Every layer starts the per-batch schedule without recomputation (Loom's
  // choice: the interleaving pauses forwards at the memory cap, layer tuning
  // adds recomputation where that stalls). false: it starts at the static
  // plan's recomputation, as the paper's levels do (Table 5 books dropping it
  // to layer tuning, §6.3); the `-rc` ablation variants measure the difference.
  bool start_without_recompute = true;
  RankingOptions ranking;
  TuningOptions tuning;
};

// What one batch's search did, level by level (simulated iteration times).
struct PipeweaverBatchReport {
  IterationSchedule schedule;  // the one returned
  double static_s = 0;         // the plan's static interleaved schedule
  double woven_s = 0;          // sub-microbatches + interleaving, default ranking
  double ranked_s = 0;         // + MCTS ranking (= woven_s when not run)
  double tuned_s = 0;          // + layer tuning (= ranked_s when not run or not better)
  double final_s = 0;          // the best of the above (what `schedule` gives)
  int flow_stages = 0;         // forward + backward stages in the flow
  int groups = 0;              // segment groups ranked
  RankingResult ranking;
  TuningResult tuning;
};

PipeweaverBatchReport SchedulePipeweaverBatch(const StrategyContext& ctx, const Plan& plan, const Batch& batch,
                                              int64_t iteration, const PipeweaverOptions& options);

StrategyResult PipeweaverStrategy(const StrategyContext& ctx);
StrategyResult PipeweaverPartitionStrategy(const StrategyContext& ctx);   // ablation: static layout only
StrategyResult PipeweaverInterleaveStrategy(const StrategyContext& ctx);  // + interleaving, default ranking
StrategyResult PipeweaverRankStrategy(const StrategyContext& ctx);        // + MCTS ranking, no layer tuning
// The paper's bookkeeping of Table 5: the per-batch schedule starts at the
// static plan's recomputation; `-interleave-rc` interleaves only, `-tune-rc`
// adds layer tuning (no ranking: it adds nothing on these batches).
StrategyResult PipeweaverInterleaveRcStrategy(const StrategyContext& ctx);
StrategyResult PipeweaverTuneRcStrategy(const StrategyContext& ctx);

// Registry hooks: the per-batch schedule of each variant.
IterationSchedule PipeweaverBatch(const StrategyContext& ctx, const Plan& plan, const Batch& batch, int64_t iteration);
IterationSchedule PipeweaverInterleaveBatch(const StrategyContext& ctx, const Plan& plan, const Batch& batch,
                                            int64_t iteration);
IterationSchedule PipeweaverRankBatch(const StrategyContext& ctx, const Plan& plan, const Batch& batch,
                                      int64_t iteration);
IterationSchedule PipeweaverInterleaveRcBatch(const StrategyContext& ctx, const Plan& plan, const Batch& batch,
                                              int64_t iteration);
IterationSchedule PipeweaverTuneRcBatch(const StrategyContext& ctx, const Plan& plan, const Batch& batch,
                                        int64_t iteration);

}  // namespace loom
