// Megatron-LM's one pipeline: every module with the backbone's TP and DP
// (replicated inside the TP group where heads do not divide), stages balanced
// by parameter count (its default even split; a layout balancing time is
// what `loom simulate` prices). Searched: TP in {1,2,4,8} inside a node, every
// PP dividing the rest, DP = the remainder, every microbatch count, 1F1B and
// interleaved (vpp 2 and 4), and the cheapest recomputation that fits.
//   megatron: current Megatron-LM (core 0.13 and later): the encoders and
//     projectors run whole on the first pipeline stage, beside the LLM's
//     embedding and its first layers (`--pipeline-model-parallel-layout`).
//   megatron-2024: as MMScale §7 and PipeWeaver §8 ran it, encoders cut into
//     the first stages like any layer, so they may take stages of their own
//     (`--encoder-pipeline-model-parallel-size`, removed in July 2025). Kept
//     for those two papers' comparisons; current Megatron-LM cannot run it.
#include <fmt/format.h>

#include "loom/strategies/baselines/baselines.h"
#include "loom/strategies/plan_builders.h"
#include "loom/strategies/search/candidate_search.h"
#include "loom/strategies/search/pipeline_grid.h"

namespace loom {

namespace {

StrategyResult SearchOnePipeline(const StrategyContext& ctx, const std::string& name, EncoderStages encoders) {
  CandidateSearch search(ctx, name);
  const int layers = StageItems(ctx.model, encoders);
  auto grid = [&] {
    ForEachPipelineGrid(ctx, layers, [&](int tp, int pp, int dp, int m) {
      search.Try([&](Recompute r) {
        return SingleUnitPlan(ctx, name, tp, pp, dp, 1, m, ScheduleKind::kOneFOneB, r, Balance::kParams, 1, encoders);
      });
      for (int vpp : {2, 4}) {
        if (pp == 1 || m % pp != 0 || pp * vpp > layers) continue;
        search.Try([&](Recompute r) {
          return SingleUnitPlan(ctx, name, tp, pp, dp, vpp, m, ScheduleKind::kInterleaved, r, Balance::kParams, 1,
                                encoders);
        });
      }
    });
  };
  search.Run(grid);
  return search.Finish(
      fmt::format("tp x pp x dp x microbatches x {{1f1b, interleaved vpp 2/4}} x recompute, stages balanced by "
                  "parameters{}",
                  encoders == EncoderStages::kFirstStage ? ", encoders on the first stage" : ""),
      [](const Plan& p) { return DescribeUnit(p.units[0], p.group_gpus); });
}

}  // namespace

StrategyResult MegatronStrategy(const StrategyContext& ctx) {
  return SearchOnePipeline(ctx, "megatron", EncoderStages::kFirstStage);
}

StrategyResult Megatron2024Strategy(const StrategyContext& ctx) {
  return SearchOnePipeline(ctx, "megatron-2024", EncoderStages::kOwnStages);
}

// Megatron-LM as Mosaic §5.1 configures it: every module data parallel over
// every GPU (TP 1, PP 1), modules one after another inside each step. Only
// the microbatches (gradient accumulation) and recomputation are searched.
StrategyResult MegatronDpStrategy(const StrategyContext& ctx) {
  return DataParallelOnAllGpus(ctx, "megatron-dp", 1, "dp = all GPUs (tp 1, pp 1) x accumulation steps x recompute");
}

}  // namespace loom
