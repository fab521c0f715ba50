#include "loom/strategies/baselines/megatron_config.h"

#include <fmt/format.h>

#include "loom/data/sample_source.h"
#include "loom/error.h"
#include "loom/strategies/plan_builders.h"

namespace loom {

void ParallelConfig::Validate(const Model& model, const Cluster& cluster, const Workload& workload) const {
  for (auto [name, v] :
       {std::pair{"tp", tp}, {"pp", pp}, {"dp", dp}, {"cp", cp}, {"vpp", vpp}, {"microbatches", microbatches}}) {
    if (v < 1) throw Error(fmt::format("--{}: must be >= 1, got {}", name, v));
  }
  if (tp * pp * dp * cp != cluster.num_gpus()) {
    throw Error(fmt::format("tp ({}) x pp ({}) x dp ({}) x cp ({}) = {} != the {} GPUs of cluster {}", tp, pp, dp, cp,
                            tp * pp * dp * cp, cluster.num_gpus(), cluster.name));
  }
  if (tp * cp > cluster.gpus_per_node || cluster.gpus_per_node % (tp * cp) != 0) {
    throw Error(
        fmt::format("tp ({}) x cp ({}) must divide the {} GPUs of a node: tensor and context parallelism "
                    "stay inside a node",
                    tp, cp, cluster.gpus_per_node));
  }
  if (workload.global_batch % (static_cast<int64_t>(dp) * microbatches) != 0) {
    throw Error(fmt::format("global batch ({}) must split into dp ({}) x microbatches ({}) equal microbatches",
                            workload.global_batch, dp, microbatches));
  }
  if (const int items = StageItems(model, EncoderStages::kFirstStage); items < pp * vpp) {
    throw Error(fmt::format(
        "pp ({}) x vpp ({}) = {} stages but {} gives at most {} (its LLM layers, the first stage also holding every "
        "encoder, as Megatron-LM runs them)",
        pp, vpp, pp * vpp, model.name, items));
  }
  if (vpp > 1 && pp < 2) {
    throw Error(
        fmt::format("--vpp {} needs --pp >= 2: Megatron-LM interleaves model chunks across pipeline ranks, "
                    "and refuses virtual stages on a single rank",
                    vpp));
  }
  if (vpp > 1 && schedule != ScheduleKind::kInterleaved) {
    throw Error(fmt::format("--vpp {} needs --schedule interleaved", vpp));
  }
  if (schedule == ScheduleKind::kCustom) {
    throw Error(
        "--schedule custom: a custom order comes with a plan's per-batch schedule; valid here: gpipe, 1f1b, "
        "interleaved, zb-h1");
  }
  sim.Validate();
}

Plan MegatronConfigPlan(const StrategyContext& ctx, const ParallelConfig& cfg) {
  cfg.Validate(ctx.model, ctx.cluster, ctx.workload);
  Plan plan = SingleUnitPlan(ctx, "megatron", cfg.tp, cfg.pp, cfg.dp, cfg.vpp, cfg.microbatches, cfg.schedule,
                             cfg.recompute, Balance::kTime, ctx.workload.zero_stage, EncoderStages::kFirstStage);
  // Context parallelism: each group of tp x cp GPUs runs one pipeline rank.
  plan.group_gpus = cfg.tp * cfg.cp;
  plan.units[0].cp = cfg.cp;
  // Megatron-LM splits each sequence zigzag over its CP ranks (2 cp chunks,
  // rank i taking i and 2cp - 1 - i): exact for one causal document, uneven
  // for packed documents and multimodal masks, priced from the batch's masks.
  if (cfg.cp > 1) plan.units[0].cp_split = CpSplit::kZigzag;
  plan.searched = fmt::format("fixed by flags: tp {} pp {} dp {} cp {} vpp {}, {} microbatches, {}", cfg.tp, cfg.pp,
                              cfg.dp, cfg.cp, cfg.vpp, cfg.microbatches, ScheduleKindName(cfg.schedule));
  return plan;
}

PlanRun SimulateConfig(const Model& model, const Cluster& cluster, const Workload& workload, const ParallelConfig& cfg,
                       int64_t iteration) {
  cfg.Validate(model, cluster, workload);
  const Batch batch = DrawBatch(workload, iteration);
  StrategyContext ctx{model, cluster, workload, batch, {}};
  const Plan plan = MegatronConfigPlan(ctx, cfg);
  PlanRun run = RunPlan(model, cluster, workload, plan, batch, nullptr, cfg.sim);
  CheckFits(
      run, fmt::format("{} on {} (tp {} pp {} dp {} cp {})", model.name, cluster.name, cfg.tp, cfg.pp, cfg.dp, cfg.cp));
  return run;
}

}  // namespace loom
