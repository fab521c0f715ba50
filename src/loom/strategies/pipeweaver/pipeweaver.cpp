#include "loom/strategies/pipeweaver/pipeweaver.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>

#include "loom/data/rng.h"
#include "loom/error.h"
#include "loom/plan/compile_plan.h"
#include "loom/plan/plan_json.h"
#include "loom/sim/plan_run.h"
#include "loom/sim/price_execution.h"
#include "loom/strategies/pipeweaver/partitioner.h"
#include "loom/strategies/plan_builders.h"
#include "loom/strategies/search/candidate_search.h"
#include "loom/strategies/search/pipeline_grid.h"

namespace loom {

namespace {

constexpr double kNoFit = std::numeric_limits<double>::infinity();

// The plan's default microbatches: contiguous runs of the batch.
std::vector<std::vector<int>> DefaultMicrobatches(const Plan& plan) {
  const int m = plan.units[0].pipelines[0].microbatches;
  const int per = static_cast<int>(plan.global_batch / m);
  std::vector<std::vector<int>> out(m);
  for (int k = 0; k < m; ++k) {
    out[k].resize(per);
    std::iota(out[k].begin(), out[k].end(), k * per);
  }
  return out;
}

// Modality module of each template stage (by its first layer's module).
std::vector<int> StageModules(const Plan& plan, const std::vector<ModalityModule>& modules) {
  std::map<std::string, int> of;
  for (size_t i = 0; i < modules.size(); ++i) {
    for (const auto& name : modules[i].modules) of[name] = static_cast<int>(i);
  }
  std::vector<int> out;
  for (const auto& st : plan.units[0].pipelines[0].stages) out.push_back(of.at(st.layers.front().module));
  return out;
}

// Simulated iteration time, or infinity when a GPU overflows.
double Simulate(const StrategyContext& ctx, const Plan& plan, const Batch& batch, const IterationSchedule* it,
                PricingMemo* memo) {
  SimOptions opt;
  opt.record_timelines = false;
  const PlanRun run = RunPlan(ctx.model, ctx.cluster, ctx.workload, plan, batch, it, opt, memo);
  return run.memory_violations.empty() ? run.metrics.iteration_time_s : kNoFit;
}

// The rank orders of an interleaving.
std::vector<std::vector<StageStep>> RankOrders(const StageFlow& flow, const Interleaving& il) {
  std::vector<std::vector<StageStep>> out(il.order.size());
  for (size_t p = 0; p < il.order.size(); ++p) {
    for (int id : il.order[p]) {
      const FlowStage& st = flow.stages[id];
      out[p].push_back({st.forward, st.stage, st.microbatch});
    }
  }
  return out;
}

struct Woven {
  IterationSchedule schedule;
  ExecutionPlan exec;
  ExecutionCosts costs;
  LayerOptions layers;
  StageFlow flow;
};

Woven BuildWoven(const StrategyContext& ctx, const Plan& plan, const Batch& batch, IterationSchedule it,
                 const std::vector<int>& stage_module, PricingMemo* memo) {
  Woven w;
  w.exec = CompilePlan(ctx.model, ctx.cluster, ctx.workload, plan, batch, &it);
  w.costs = PriceExecution(w.exec, ctx.model, ctx.cluster, batch, &w.layers, memo);
  w.flow = BuildStageFlow(w.exec.schedule, w.costs.replicas[0], stage_module, WovenStageMicrobatches(plan, it),
                          ctx.cluster.usable_mem_bytes());
  w.schedule = std::move(it);
  return w;
}

}  // namespace

PipeweaverBatchReport SchedulePipeweaverBatch(const StrategyContext& ctx, const Plan& plan, const Batch& batch,
                                              int64_t iteration, const PipeweaverOptions& options) {
  if (plan.units.size() != 1 || plan.units[0].pipelines.size() != 1) {
    throw Error("pipeweaver: the plan must have one unit and one pipeline template (a pipeweaver plan)");
  }
  const Unit& unit = plan.units[0];
  const int tp = unit.tp, pp = unit.pipelines[0].pp;
  PipeweaverBatchReport rep;
  PricingMemo memo;  // this batch's token counts and stage prices, shared by every schedule tried on it
  rep.schedule.iteration = iteration;
  rep.schedule.microbatch_samples = DefaultMicrobatches(plan);
  rep.static_s = Simulate(ctx, plan, batch, &rep.schedule, &memo);
  rep.woven_s = rep.ranked_s = rep.tuned_s = rep.final_s = rep.static_s;
  if (!options.weave) return rep;

  // §5, per batch: sub-microbatches, stage flows.
  const std::vector<ModalityModule> modules = StaticPartition(ctx, tp, pp);
  const std::vector<int> stage_module = StageModules(plan, modules);
  IterationSchedule it = rep.schedule;
  it.module_sub_microbatches = SubMicrobatchCounts(ctx.model, plan, modules, batch, it.microbatch_samples);
  if (it.module_sub_microbatches.empty()) {  // nothing to cut: mark the schedule woven with unit counts
    it.module_sub_microbatches[unit.modules.front()] = std::vector<int>(it.microbatch_samples.size(), 1);
  }
  // Every layer starts without recomputation: the interleaving pauses forwards
  // to stay within memory and layer tuning adds recomputation where that
  // stalls. Only when even that cannot fit, the plan's recomputation is the start.
  if (options.start_without_recompute) it.recompute = Recompute::kNone;
  Woven w = BuildWoven(ctx, plan, batch, it, stage_module, &memo);
  InterleaveOptions io = options.ranking.interleave;
  std::vector<int> position = DefaultRanking(w.flow);
  Interleaving timeline = Interleaver(w.flow).Run(position, io);
  if (!timeline.fits && it.recompute && unit.recompute != Recompute::kNone) {
    it.recompute.reset();
    w = BuildWoven(ctx, plan, batch, it, stage_module, &memo);
    timeline = Interleaver(w.flow).Run(position, io);
  }
  const char base_letter = it.recompute ? 'n' : RecomputeLetter(unit.recompute);
  rep.flow_stages = static_cast<int>(w.flow.stages.size());
  rep.groups = w.flow.num_groups();

  // §6.2 with the default ranking, then §6.1's ranking.
  w.schedule.rank_orders = RankOrders(w.flow, timeline);
  rep.woven_s = Simulate(ctx, plan, batch, &w.schedule, &memo);
  IterationSchedule best = w.schedule;
  double best_s = rep.woven_s;
  rep.ranked_s = rep.woven_s;
  if (options.rank) {
    RankingOptions ro = options.ranking;
    ro.seed = Rng::Mix(ctx.workload.seed ^ options.ranking.seed, static_cast<uint64_t>(iteration));
    ro.max_rollouts = ctx.schedule_rollouts;
    ro.budget_s = ctx.schedule_budget_s;
    rep.ranking = RankByMcts(w.flow, ro);
    IterationSchedule ranked = w.schedule;
    ranked.rank_orders = RankOrders(w.flow, rep.ranking.best);
    rep.ranked_s = Simulate(ctx, plan, batch, &ranked, &memo);
    if (rep.ranked_s < best_s) {
      best = std::move(ranked);
      best_s = rep.ranked_s;
      position = rep.ranking.position;
      timeline = rep.ranking.best;
    }
  }
  rep.tuned_s = best_s;

  // §6.3: per-layer recomputation on the chosen timeline, then re-interleave.
  if (options.tune) {
    std::vector<int> pairs;
    std::vector<std::vector<TuningCandidate>> cands;
    for (size_t s = 0; s < w.flow.forward_id.size(); ++s) {
      for (size_t j = 0; j < w.flow.forward_id[s].size(); ++j) {
        pairs.push_back(w.flow.forward_id[s][j]);
        cands.push_back(PairCandidates(w.layers.at[s][j], options.tuning.candidates));
      }
    }
    rep.tuning = TuneLayers(w.flow, timeline, pairs, cands, options.tuning);
    if (rep.tuning.feasible) {
      IterationSchedule tuned = best;
      for (size_t i = 0; i < pairs.size(); ++i) {
        const FlowStage& st = w.flow.stages[pairs[i]];
        const std::string& letters = cands[i][rep.tuning.choice[i]].layers;
        if (letters != std::string(letters.size(), base_letter)) {
          std::vector<Recompute> layers;
          for (char x : letters) {
            layers.push_back(RecomputeFromLetter(x));
          }
          tuned.layer_recompute.push_back({st.stage, st.microbatch, std::move(layers)});
        }
      }
      Woven t = BuildWoven(ctx, plan, batch, tuned, stage_module, &memo);
      t.schedule.rank_orders = RankOrders(t.flow, Interleaver(t.flow).Run(position, io));
      const double tuned_s = Simulate(ctx, plan, batch, &t.schedule, &memo);
      if (tuned_s < best_s) {
        best = std::move(t.schedule);
        best_s = tuned_s;
      }
    }
    rep.tuned_s = best_s;
  }
  if (best_s < rep.static_s) {
    rep.schedule = std::move(best);
    rep.final_s = best_s;
  }
  return rep;
}

namespace {

// The fastest static layouts re-ranked by their woven schedule.
constexpr size_t kWoven = 3;

StrategyResult Search(const StrategyContext& ctx, const std::string& name, const PipeweaverOptions& options) {
  CandidateSearch search(ctx, name);
  struct Fit {
    Plan plan;
    double time_s;
  };
  std::vector<Fit> fits;
  std::map<std::pair<int, int>, std::vector<ModalityModule>> partitions;
  ForEachPipelineGrid(ctx, ctx.model.num_layers(), [&](int tp, int pp, int dp, int m) {
    auto found = partitions.find({tp, pp});
    if (found == partitions.end())
      found = partitions.emplace(std::make_pair(tp, pp), StaticPartition(ctx, tp, pp)).first;
    const auto& modules = found->second;
    int vpp = 0;
    for (const auto& mod : modules) vpp += mod.segments;
    if (vpp > 1 && m % pp != 0) return;  // the static interleaved schedule needs m divisible by pp
    // Only the kWoven fastest static layouts are used: a layout whose bound
    // passes the kWoven-th fastest time so far is not simulated. Its later
    // recomputation variants only add work to every stage of the same static
    // order, so they are slower still and skipped with it.
    double above_s = -1;
    if (fits.size() >= kWoven) {
      std::vector<double> times;
      for (const Fit& f : fits) times.push_back(f.time_s);
      std::nth_element(times.begin(), times.begin() + (kWoven - 1), times.end());
      above_s = times[kWoven - 1];
    }
    for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
      Plan plan = WovenPlan(ctx, modules, tp, pp, dp, m, r);
      plan.strategy = name;
      const double t = search.EvaluateUpTo(plan, above_s);
      if (t == CandidateSearch::kAbove) break;
      if (t > 0) {
        fits.push_back({std::move(plan), t});
        break;
      }
    }
  });
  auto describe = [&](const Plan& p) {
    std::string segments;
    const auto& modules = partitions.at({p.units[0].tp, p.units[0].pipelines[0].pp});
    for (const auto& mod : modules) {
      segments +=
          fmt::format("{}{}:K{}B{}", segments.empty() ? "" : ",", mod.name, mod.segments, mod.sub_microbatch_size);
    }
    return DescribeUnit(p.units[0], p.group_gpus) + " segments " + segments;
  };
  StrategyResult res = search.Finish(
      "tp x pp x dp x microbatches x recompute; per (tp, pp) the modality-aware layout (B_i at 95% efficiency, "
      "K_i = floor(T_i/T_1), P x K_i chunks per module); the 3 fastest static layouts re-ranked by their per-batch "
      "woven schedule on the representative batch",
      describe);
  if (options.weave && fits.size() > 1) {
    std::stable_sort(fits.begin(), fits.end(), [](const Fit& a, const Fit& b) { return a.time_s < b.time_s; });
    StrategyContext quick = ctx;  // a tenth of the per-batch search per layout
    quick.schedule_rollouts = ctx.schedule_rollouts / 10;
    PipeweaverOptions full;  // every variant picks its layout with the full per-batch search
    double best_s = kNoFit;
    for (size_t i = 0; i < fits.size() && i < kWoven; ++i) {
      if (ctx.progress) ctx.progress({name + ": weaving static layout", static_cast<int64_t>(i) + 1, kWoven, 0});
      const double t = SchedulePipeweaverBatch(quick, fits[i].plan, ctx.representative, 0, full).final_s;
      if (t < best_s) {
        best_s = t;
        const std::string searched = res.plan.searched;
        res.plan = fits[i].plan;
        res.plan.searched = searched;
      }
    }
    res.config = describe(res.plan);
  }
  return res;
}

PipeweaverOptions Levels(bool weave, bool rank, bool tune, bool start_without_recompute = true) {
  PipeweaverOptions o;
  o.weave = weave;
  o.rank = rank;
  o.tune = tune;
  o.start_without_recompute = start_without_recompute;
  return o;
}

}  // namespace

StrategyResult PipeweaverStrategy(const StrategyContext& ctx) {
  return Search(ctx, "pipeweaver", Levels(true, true, true));
}
StrategyResult PipeweaverPartitionStrategy(const StrategyContext& ctx) {
  return Search(ctx, "pipeweaver-partition", Levels(true, true, true));
}
StrategyResult PipeweaverInterleaveStrategy(const StrategyContext& ctx) {
  return Search(ctx, "pipeweaver-interleave", Levels(true, true, true));
}
StrategyResult PipeweaverRankStrategy(const StrategyContext& ctx) {
  return Search(ctx, "pipeweaver-rank", Levels(true, true, true));
}

StrategyResult PipeweaverInterleaveRcStrategy(const StrategyContext& ctx) {
  return Search(ctx, "pipeweaver-interleave-rc", Levels(true, true, true));
}
StrategyResult PipeweaverTuneRcStrategy(const StrategyContext& ctx) {
  return Search(ctx, "pipeweaver-tune-rc", Levels(true, true, true));
}

IterationSchedule PipeweaverBatch(const StrategyContext& ctx, const Plan& plan, const Batch& batch, int64_t iteration) {
  return SchedulePipeweaverBatch(ctx, plan, batch, iteration, Levels(true, true, true)).schedule;
}
IterationSchedule PipeweaverInterleaveBatch(const StrategyContext& ctx, const Plan& plan, const Batch& batch,
                                            int64_t iteration) {
  return SchedulePipeweaverBatch(ctx, plan, batch, iteration, Levels(true, false, false)).schedule;
}
IterationSchedule PipeweaverRankBatch(const StrategyContext& ctx, const Plan& plan, const Batch& batch,
                                      int64_t iteration) {
  return SchedulePipeweaverBatch(ctx, plan, batch, iteration, Levels(true, true, false)).schedule;
}

IterationSchedule PipeweaverInterleaveRcBatch(const StrategyContext& ctx, const Plan& plan, const Batch& batch,
                                              int64_t iteration) {
  return SchedulePipeweaverBatch(ctx, plan, batch, iteration, Levels(true, false, false, false)).schedule;
}
IterationSchedule PipeweaverTuneRcBatch(const StrategyContext& ctx, const Plan& plan, const Batch& batch,
                                        int64_t iteration) {
  return SchedulePipeweaverBatch(ctx, plan, batch, iteration, Levels(true, false, true, false)).schedule;
}

}  // namespace loom
