#include "loom/strategies/plan_builders.h"

#include <fmt/format.h>

#include <algorithm>

#include "loom/cost/frozen.h"
#include "loom/cost/layer_pricing.h"
#include "loom/cost/token_stats.h"
#include "loom/error.h"
#include "loom/plan/plan_json.h"

namespace loom {

std::vector<std::pair<int, int>> UnitLayers(const Model& model, const std::vector<std::string>& modules) {
  std::vector<std::pair<int, int>> out;
  for (const auto& name : modules) {
    const int mi = model.FindModule(name);
    for (int l = 0; l < static_cast<int>(model.modules[mi].layers.size()); ++l) out.push_back({mi, l});
  }
  return out;
}

std::vector<StageSpec> StagesFromPartition(const Model& model, const std::vector<std::pair<int, int>>& layers,
                                           const Partition& partition, int pp) {
  std::vector<StageSpec> stages;
  for (int s = 0; s < partition.num_stages(); ++s) {
    StageSpec st;
    st.rank = s % pp;
    for (int i = partition.begin[s]; i < partition.begin[s + 1];) {
      int j = i;
      while (j < partition.begin[s + 1] && layers[j].first == layers[i].first) ++j;
      st.layers.push_back({model.modules[layers[i].first].name, layers[i].second, layers[j - 1].second + 1});
      i = j;
    }
    stages.push_back(std::move(st));
  }
  return stages;
}

std::vector<double> LayerWeights(const StrategyContext& ctx, const std::vector<std::pair<int, int>>& layers,
                                 Balance balance, int tp) {
  std::vector<double> w;
  if (balance == Balance::kParams) {
    // Megatron-LM balances pipeline stages by parameter count; a layer without
    // weights (none in the zoo today) still counts a little so it is placed.
    for (auto [mi, li] : layers) w.push_back(std::max<double>(1.0, LayerParams(ctx.model.modules[mi].layers[li])));
    return w;
  }
  auto& cached = ctx.memo->layer_weights[{layers, static_cast<int>(balance), tp}];
  if (!cached.empty() || layers.empty()) return cached;
  if (!ctx.memo->representative_tokens) {
    ctx.memo->representative_tokens = CountModuleTokens(ctx.model, ctx.representative.samples);
  }
  const auto& tokens = *ctx.memo->representative_tokens;
  auto needs = ComputeBackwardNeeds(ctx.model);
  if (balance == Balance::kTimeFrozenUnaware) {
    for (auto& module : needs) {
      for (auto& n : module) n = {true, true};
    }
  }
  for (auto [mi, li] : layers) {
    LayerParallelism par;
    par.tp = tp;
    par.split = SplitsOverTensorParallel(ctx.model.modules[mi], tp);
    LayerTimes t = PriceLayer(ctx.model.modules[mi].layers[li], tokens[mi], needs[mi][li], ctx.cluster, par);
    w.push_back(t.forward_s + t.backward_data_s + t.backward_weight_s);
  }
  cached = w;
  return w;
}

namespace {

// The leading layers up to the backbone's first transformer layer: the
// encoders, projectors and the LLM's embedding (0 without a backbone).
size_t LeadingLayers(const Model& model, const std::vector<std::pair<int, int>>& layers) {
  size_t lead = 0;
  while (lead < layers.size()) {
    const Module& m = model.modules[layers[lead].first];
    if (m.role == ModuleRole::kBackbone && m.layers[layers[lead].second].kind != LayerKind::kEmbedding) break;
    ++lead;
  }
  return lead == layers.size() ? 0 : lead;
}

}  // namespace

int StageItems(const Model& model, EncoderStages encoders) {
  std::vector<std::string> modules;
  for (const auto& m : model.modules) modules.push_back(m.name);
  const auto layers = UnitLayers(model, modules);
  const size_t lead = encoders == EncoderStages::kFirstStage ? LeadingLayers(model, layers) : 0;
  return static_cast<int>(layers.size() - lead) + (lead > 0 ? 1 : 0);
}

Partition FirstStageHoldsEncoders(const Model& model, const std::vector<std::pair<int, int>>& layers,
                                  const std::vector<double>& weights, int stages) {
  // The leading layers count as one item for the partitioner, so they land
  // on one stage together.
  const size_t lead = LeadingLayers(model, layers);
  std::vector<double> merged;
  double first = 0;
  for (size_t i = 0; i < lead; ++i) first += weights[i];
  if (lead > 0) merged.push_back(first);
  merged.insert(merged.end(), weights.begin() + static_cast<std::ptrdiff_t>(lead), weights.end());
  if (static_cast<int>(merged.size()) < stages) {
    throw Error(fmt::format(
        "{} stages need {} LLM layers besides the first stage's encoders (Megatron-LM runs every encoder with "
        "the first stage); the model has {}",
        stages, stages - 1, merged.size() - (lead > 0 ? 1 : 0)));
  }
  Partition p = MinMaxPartition(merged, stages);
  // Where the first stage (encoders) is the slowest, min-max leaves the other
  // stages anywhere under it (ties go to the earliest cuts: "E|t|t*12|t*19L");
  // a user writing the layout balances them too, so the rest is cut again on
  // its own, stage after stage.
  for (int s = 1; s + 1 < stages; ++s) {
    const std::vector<double> rest(merged.begin() + p.begin[s], merged.end());
    const Partition q = MinMaxPartition(rest, stages - s);
    for (int k = 0; k <= stages - s; ++k) p.begin[s + k] = p.begin[s] + q.begin[k];
    for (int k = 0; k < stages - s; ++k) p.stage_cost[s + k] = q.stage_cost[k];
  }
  const int shift = lead > 0 ? static_cast<int>(lead) - 1 : 0;
  for (size_t s = 1; s < p.begin.size(); ++s) p.begin[s] += shift;
  return p;
}

Plan SingleUnitPlan(const StrategyContext& ctx, const std::string& strategy, int tp, int pp, int dp, int vpp,
                    int microbatches, ScheduleKind schedule, Recompute recompute, Balance balance, int zero_stage,
                    EncoderStages encoders) {
  Plan plan = EmptyPlan(ctx, strategy, tp);
  std::vector<std::string> modules;
  for (const auto& m : ctx.model.modules) modules.push_back(m.name);
  Unit u =
      encoders == EncoderStages::kOwnStages
          ? MakeUnit(ctx, "all", modules, 0, tp, 0, dp, pp * vpp, microbatches, schedule, recompute, balance)
          : MakeUnit(ctx, "all", modules, 0, tp, 0, dp, pp * vpp, microbatches, schedule, recompute,
                     FirstStageHoldsEncoders(ctx.model, UnitLayers(ctx.model, modules),
                                             LayerWeights(ctx, UnitLayers(ctx.model, modules), balance, tp), pp * vpp));
  // MakeUnit cut pp x vpp stages on pp x vpp ranks; put stage v on rank v % pp.
  u.pipelines[0].pp = pp;
  for (size_t v = 0; v < u.pipelines[0].stages.size(); ++v) u.pipelines[0].stages[v].rank = static_cast<int>(v) % pp;
  u.zero_stage = zero_stage;
  plan.units.push_back(std::move(u));
  return plan;
}

Unit MakeUnit(const StrategyContext& ctx, const std::string& name, const std::vector<std::string>& modules,
              int first_group, int tp, int phase, int replicas, int pp, int microbatches, ScheduleKind schedule,
              Recompute recompute, Balance balance) {
  const auto layers = UnitLayers(ctx.model, modules);
  if (static_cast<int>(layers.size()) < pp) {
    throw Error(fmt::format("unit {}: {} layers cannot fill {} stages", name, layers.size(), pp));
  }
  return MakeUnit(ctx, name, modules, first_group, tp, phase, replicas, pp, microbatches, schedule, recompute,
                  MinMaxPartition(LayerWeights(ctx, layers, balance, tp), pp));
}

Unit MakeUnit(const StrategyContext& ctx, const std::string& name, const std::vector<std::string>& modules,
              int first_group, int tp, int phase, int replicas, int pp, int microbatches, ScheduleKind schedule,
              Recompute recompute, const Partition& partition) {
  Unit u;
  u.name = name;
  u.modules = modules;
  u.first_group = first_group;
  u.tp = tp;
  u.phase = phase;
  u.recompute = recompute;
  PipelineSpec ps;
  ps.replicas = replicas;
  ps.pp = pp;
  ps.microbatches = microbatches;
  ps.schedule = schedule;
  ps.stages = StagesFromPartition(ctx.model, UnitLayers(ctx.model, modules), partition, pp);
  u.pipelines.push_back(std::move(ps));
  return u;
}

Plan EmptyPlan(const StrategyContext& ctx, const std::string& strategy, int group_gpus) {
  Plan plan;
  plan.strategy = strategy;
  plan.model = ctx.model.name;
  plan.cluster = ctx.cluster.name;
  plan.workload = ctx.workload.name;
  plan.global_batch = ctx.workload.global_batch;
  plan.group_gpus = group_gpus;
  plan.made_for = Plan::MadeFor{PrecisionName(ctx.workload.precision), ctx.workload.source.seq_len,
                                ctx.workload.zero_stage, ctx.workload.seed};
  return plan;
}

std::string DescribeUnit(const Unit& u, int group_gpus) {
  // GPUs of a group that TP x CP leaves split each microbatch's sequences
  // (data parallel inside the group): "dp4x4" is 4 replicas of 4 such GPUs
  // each, so that tp x pp x dp multiplies out to the unit's GPUs.
  const int shares = std::max(1, group_gpus / std::max(1, u.tp * u.cp));
  std::string pipes;
  for (const auto& p : u.pipelines) {
    std::string sched = p.schedule == ScheduleKind::kInterleaved ? fmt::format("interleaved(vpp{})", p.vpp())
                                                                 : ScheduleKindName(p.schedule);
    const std::string dp = shares > 1 ? fmt::format("{}x{}", p.replicas, shares) : std::to_string(p.replicas);
    pipes += fmt::format("{}pp{} dp{} m{} {}", pipes.empty() ? "" : " | ", p.pp, dp, p.microbatches, sched);
  }
  std::string extra;
  if (u.cp > 1) extra += fmt::format(" cp{}", u.cp);
  if (u.sm_fraction < 1) extra += fmt::format(" sm{:.2g}", u.sm_fraction);
  if (u.zero_stage != 1) extra += fmt::format(" zero{}", u.zero_stage);
  return fmt::format("tp{} {}{} rc={}", u.tp, pipes, extra, RecomputeName(u.recompute));
}

}  // namespace loom
