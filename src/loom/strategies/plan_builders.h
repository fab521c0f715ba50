// Building blocks the strategies share: cutting a unit's layers into pipeline
// stages, per-layer balance weights (parameters as Megatron-LM does, or
// simulated time on a batch), and the plans and units built from them. The
// search loop, its grid and the model's module waves are in strategies/search/.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "loom/pipeline/partition.h"
#include "loom/plan/plan.h"
#include "loom/strategies/strategy.h"

namespace loom {

// Flattened (module, layer) list of `modules` (names, in model order).
std::vector<std::pair<int, int>> UnitLayers(const Model& model, const std::vector<std::string>& modules);

// Stages of one pipeline template from a partition of UnitLayers into
// pp x vpp stages (stage v on rank v % pp).
std::vector<StageSpec> StagesFromPartition(const Model& model, const std::vector<std::pair<int, int>>& layers,
                                           const Partition& partition, int pp);

// Append-only. kTimeFrozenUnaware: the time as if every layer trained (a
// planner blind to frozen modules: Cornstarch's "frozen-unaware" baseline).
enum class Balance { kParams, kTime, kTimeFrozenUnaware };
// Per-layer weights for the min-max partitioner: parameter counts, or forward +
// backward time of the whole representative batch at tensor parallel `tp`
// (frozen-aware, Cornstarch Eq. 3.2-3.3 via cost/frozen.h, unless unaware).
std::vector<double> LayerWeights(const StrategyContext& ctx, const std::vector<std::pair<int, int>>& layers,
                                 Balance balance, int tp);

// Where a one-pipeline plan puts the modules before the backbone (encoders,
// projectors). kFirstStage is current Megatron-LM (core 0.13 and later, its
// `--pipeline-model-parallel-layout`): they run whole on the first pipeline
// stage beside the LLM's embedding, so no stage holds encoders alone.
// kOwnStages cuts the whole module chain as one list of layers, so encoders
// may fill stages of their own: Megatron-LM as MMScale §7 and PipeWeaver §8
// ran it (with the `--encoder-pipeline-model-parallel-size` removed in July
// 2025), and the layout Optimus and nnScaler start from.
enum class EncoderStages { kFirstStage, kOwnStages };

// A one-unit plan with one pipeline template (Megatron-LM's layout).
Plan SingleUnitPlan(const StrategyContext& ctx, const std::string& strategy, int tp, int pp, int dp, int vpp,
                    int microbatches, ScheduleKind schedule, Recompute recompute, Balance balance, int zero_stage,
                    EncoderStages encoders = EncoderStages::kOwnStages);

// How many items a one-pipeline plan's stages are cut from: every layer, or
// (kFirstStage) the layers before the backbone's first transformer layer as
// one item and each later layer. A pipeline has at most this many stages.
int StageItems(const Model& model, EncoderStages encoders);

// The min-max partition of `weights` (one per layer of `layers`) into
// `stages` whose first stage holds every layer before the backbone's first
// transformer layer (EncoderStages::kFirstStage). Throws loom::Error when
// the rest cannot fill the other stages.
Partition FirstStageHoldsEncoders(const Model& model, const std::vector<std::pair<int, int>>& layers,
                                  const std::vector<double>& weights, int stages);

// One unit with one pipeline template of `replicas` x `pp` groups starting at
// `first_group`, its stages balanced by `balance` at tensor parallel `tp`.
Unit MakeUnit(const StrategyContext& ctx, const std::string& name, const std::vector<std::string>& modules,
              int first_group, int tp, int phase, int replicas, int pp, int microbatches, ScheduleKind schedule,
              Recompute recompute, Balance balance);
// The same with the stages cut by a partition the strategy computed itself
// (Entrain's Eq. 4.1 on its fitted curves). REQUIRES: partition has pp stages.
Unit MakeUnit(const StrategyContext& ctx, const std::string& name, const std::vector<std::string>& modules,
              int first_group, int tp, int phase, int replicas, int pp, int microbatches, ScheduleKind schedule,
              Recompute recompute, const Partition& partition);
// An empty plan for the context (names, batch, group size).
Plan EmptyPlan(const StrategyContext& ctx, const std::string& strategy, int group_gpus);

// "tp4 pp4 dp1 m16 interleaved(vpp2) recompute=full" for a unit.
// `group_gpus`: the plan's, for units whose groups split sequences beyond TP x CP.
std::string DescribeUnit(const Unit& unit, int group_gpus = 1);

}  // namespace loom
