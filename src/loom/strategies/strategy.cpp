#include "loom/strategies/strategy.h"

#include <fmt/format.h>

#include "loom/error.h"
#include "loom/strategies/baselines/baselines.h"
#include "loom/strategies/mmscale/batch_reorder.h"
#include "loom/strategies/mmscale/mmscale.h"
#include "loom/strategies/pipeweaver/pipeweaver.h"

namespace loom {

namespace {

using BatchScheduler = IterationSchedule (*)(const StrategyContext&, const Plan&, const Batch&, int64_t);

IterationSchedule MmscaleBatch(const StrategyContext& ctx, const Plan& plan, const Batch& batch, int64_t iteration) {
  return MmscaleScheduleBatch(ctx.model, ctx.cluster, ctx.workload, plan, batch, iteration);
}

struct Entry {
  const char* name;
  StrategyResult (*run)(const StrategyContext&);
  const char* description;
  BatchScheduler schedule = nullptr;  // per-batch refinement, if any
  bool variant = false;               // an ablation: runs only when named
};

const std::vector<Entry>& Registry() {
  static const std::vector<Entry> entries = {
      {"megatron", MegatronStrategy,
       "Megatron-LM: one pipeline, encoders first, stages balanced by parameters; TP/PP/DP/microbatches/1F1B or "
       "interleaved/recompute searched"},
      {"fsdp", FsdpStrategy, "FSDP / ZeRO-3 data parallelism over every GPU"},
      {"distmm", DistMmStrategy,
       "DistMM: parallel branches on disjoint whole-GPU sets sized by time, dependent modules in waves"},
      {"optimus", OptimusStrategy,
       "Optimus (coarse-grained): encoders data parallel on the backbone's GPUs, scheduled around its pipeline"},
      {"nnscaler", NnScalerStrategy,
       "nnScaler*: one static 1F1B plan, stages balanced by time on a representative batch"},
      {"mmscale", MmscaleStrategy,
       "MMScale: encoder, backbone and generator on disjoint GPUs with their own TP/DP/PP (Alg. 1 allocation), "
       "brokers, per-batch intra- and inter-microbatch reordering",
       MmscaleBatch},
      {"pipeweaver", PipeweaverStrategy,
       "PipeWeaver: modality-aware layout (P x K_i chunks per module), per batch sub-microbatches, MCTS-ranked "
       "dual-queue interleaving and per-layer recomputation by ILP (CBC)",
       PipeweaverBatch},
      {"mmscale-ratio", MmscaleRatioStrategy,
       "MMScale's ratio-based baseline: the same units, GPUs in proportion to FLOPs, no reordering", nullptr, true},
      {"mmscale-noreorder", MmscaleNoReorderStrategy,
       "MMScale's allocation trained in the loader's (random) order", nullptr, true},
      {"pipeweaver-partition", PipeweaverPartitionStrategy,
       "PipeWeaver ablation: the modality-aware layout with its static interleaved schedule", nullptr, true},
      {"pipeweaver-interleave", PipeweaverInterleaveStrategy,
       "PipeWeaver ablation: + sub-microbatches and dual-queue interleaving, default ranking", PipeweaverInterleaveBatch,
       true},
      {"pipeweaver-rank", PipeweaverRankStrategy,
       "PipeWeaver ablation: + MCTS ranking, no layer tuning", PipeweaverRankBatch, true},
  };
  return entries;
}

}  // namespace

std::vector<std::string> StrategyNames(bool variants) {
  std::vector<std::string> names;
  for (const auto& e : Registry()) {
    if (variants || !e.variant) names.push_back(e.name);
  }
  return names;
}

std::string StrategyDescription(const std::string& name) {
  for (const auto& e : Registry()) {
    if (name == e.name) return e.description;
  }
  return "";
}

StrategyResult RunStrategy(const std::string& name, const StrategyContext& ctx) {
  for (const auto& e : Registry()) {
    if (name == e.name) return e.run(ctx);
  }
  throw Error(fmt::format("unknown strategy '{}'; valid: {}, or all", name, fmt::join(StrategyNames(true), ", ")));
}

bool SchedulesBatches(const std::string& name) {
  for (const auto& e : Registry()) {
    if (name == e.name) return e.schedule != nullptr;
  }
  return false;
}

IterationSchedule ScheduleBatch(const std::string& name, const StrategyContext& ctx, const Plan& plan,
                                const Batch& batch, int64_t iteration) {
  for (const auto& e : Registry()) {
    if (name == e.name && e.schedule != nullptr) return e.schedule(ctx, plan, batch, iteration);
  }
  throw Error(fmt::format("strategy '{}' does not schedule batches", name));
}

}  // namespace loom
