#include "loom/strategies/cornstarch/cornstarch.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <numeric>

#include "loom/cost/token_stats.h"
#include "loom/error.h"
#include "loom/strategies/search/candidate_search.h"
#include "loom/strategies/search/module_waves.h"
#include "loom/strategies/search/pipeline_grid.h"

namespace loom {

namespace {

// Pipeline depths to try for a module of `layers` layers within `groups` GPU groups.
std::vector<int> Depths(int layers, int groups) {
  std::vector<int> out;
  for (int pp = 1; pp <= std::min(layers, groups); pp *= 2) out.push_back(pp);
  return out;
}

std::string DescribeCornstarchPlan(const Plan& p) {
  std::string s;
  for (const auto& u : p.units) s += (s.empty() ? "" : "; ") + u.name + " " + DescribeUnit(u, p.group_gpus);
  return s;
}

}  // namespace

StrategyResult CornstarchPlan(const StrategyContext& ctx, Balance balance, const std::string& name,
                              CornstarchModes modes) {
  CandidateSearch search(ctx, name);
  ModuleWaves waves = SplitWaves(ctx.model);
  // The LLM's pipeline carries whatever follows it (a generator) too.
  std::vector<std::string> llm = waves.backbone;
  llm.insert(llm.end(), waves.downstream.begin(), waves.downstream.end());
  if (waves.backbone.empty()) {
    throw Error(fmt::format("{}: model {} has no backbone for the encoders to feed (Cornstarch trains multimodal LLMs)",
                            name, ctx.model.name));
  }
  const int branches = static_cast<int>(waves.upstream_branches.size());
  std::vector<int> branch_layers;
  for (const auto& b : waves.upstream_branches)
    branch_layers.push_back(static_cast<int>(UnitLayers(ctx.model, b).size()));
  const int llm_layers = static_cast<int>(UnitLayers(ctx.model, llm).size());
  const int64_t B = ctx.workload.global_batch;
  // Token-balanced context parallelism for the LLM (§3.3.2) where its
  // sequences are long enough to split: cp ranks each keep >= 4096 tokens of
  // the longest document (the thesis evaluates CP at 16K-64K).
  int64_t longest = 0;
  const int llm_module = ctx.model.FindModule(waves.backbone.front());
  for (const Sample& s : ctx.representative.samples) {
    std::map<int, int64_t> per_doc;
    for (const auto& seg : ModuleMaskSegments(ctx.model, llm_module, s)) per_doc[seg.doc] += seg.tokens;
    for (const auto& [doc, tokens] : per_doc) longest = std::max(longest, tokens);
  }
  // Colocated (the released code's mode): every module in one pipeline, the
  // encoders' stages first, cut by the same frozen-aware (or unaware) times.
  std::vector<std::string> all;
  for (const auto& m : ctx.model.modules) all.push_back(m.name);
  const int all_layers = static_cast<int>(UnitLayers(ctx.model, all).size());
  auto colocated = [&](Balance by) {
    for (int tp : TpChoices(ctx.cluster)) {
      if (ctx.fixed_tp > 0 && tp != ctx.fixed_tp) continue;  // `--tp` / `--pp`: the colocated pipeline's degrees
      const int groups = ctx.cluster.num_gpus() / tp;
      for (int pp : Depths(all_layers, groups)) {
        if (ctx.fixed_pp > 0 && pp != ctx.fixed_pp) continue;
        const int dp = groups / pp;
        if (ctx.fixed_dp > 0 && dp != ctx.fixed_dp) continue;
        if (B % dp != 0) continue;
        for (int m : Divisors(B / dp)) {
          if (m < pp) continue;
          search.Try([&](Recompute r) {
            Plan plan = EmptyPlan(ctx, name, tp);
            plan.units.push_back(MakeUnit(ctx, "colocated", all, 0, tp, 0, dp, pp, m, ScheduleKind::kOneFOneB, r, by));
            return plan;
          });
        }
      }
    }
  };
  // Bound-first (search/candidate_search.h): the loop depends on no result.
  search.Run([&] {
    if (modes.colocated) colocated(balance);
    // Pinned degrees describe one pipeline: the modality-parallel shapes (a depth per branch) are not searched.
    const bool pinned = ctx.fixed_tp > 0 || ctx.fixed_pp > 0 || ctx.fixed_dp > 0;
    for (int tp : modes.modality_parallel && !pinned ? TpChoices(ctx.cluster) : std::vector<int>{}) {
      for (int cp : {1, 2, 4, 8}) {
        if (tp * cp > ctx.cluster.gpus_per_node || (cp > 1 && longest < 4096 * cp)) continue;
        const int groups = ctx.cluster.num_gpus() / (tp * cp);
        // Every combination of branch depths (each a power of two), then the LLM's.
        std::vector<std::vector<int>> branch_depths{{}};
        for (int b = 0; b < branches; ++b) {
          std::vector<std::vector<int>> next;
          for (const auto& d : branch_depths) {
            for (int pp : Depths(branch_layers[b], groups)) {
              auto e = d;
              e.push_back(pp);
              next.push_back(e);
            }
          }
          branch_depths = std::move(next);
        }
        // Each branch's TP: the LLM's, or (when that is above 1) TP 1 with the
        // group's GPUs sharing the branch's sequences (Cornstarch gives every
        // encoder its own parallel configuration; a small encoder gains nothing
        // from TP's all-reduces).
        std::vector<std::vector<int>> branch_tps{{}};
        for (int b = 0; b < branches; ++b) {
          std::vector<std::vector<int>> next;
          for (const auto& t : branch_tps) {
            for (int btp : tp > 1 ? std::vector<int>{tp, 1} : std::vector<int>{tp}) {
              auto e = t;
              e.push_back(btp);
              next.push_back(e);
            }
          }
          branch_tps = std::move(next);
        }
        for (const auto& tps : branch_tps)
          for (const auto& depths : branch_depths) {
            const int encoder_groups = std::accumulate(depths.begin(), depths.end(), 0);
            for (int llm_pp : Depths(llm_layers, groups)) {
              const int per_replica = encoder_groups + llm_pp;
              if (per_replica > groups) continue;
              const int dp = groups / per_replica;  // replicas of the whole arrangement that fit
              if (B % dp != 0) continue;
              // Microbatches per replica: enough to fill the deepest pipeline.
              const int deepest =
                  std::max(llm_pp, depths.empty() ? 1 : *std::max_element(depths.begin(), depths.end()));
              for (int m : Divisors(B / dp)) {
                if (m < deepest) continue;
                search.Try([&](Recompute r) {
                  Plan plan = EmptyPlan(ctx, name, tp * cp);  // encoders share each group's sequences
                  int first = 0;
                  for (int b = 0; b < branches; ++b) {
                    plan.units.push_back(MakeUnit(ctx, "encoder" + std::to_string(b), waves.upstream_branches[b], first,
                                                  tps[b], 0, dp, depths[b], m, ScheduleKind::kOneFOneB, r, balance));
                    first += dp * depths[b];
                  }
                  Unit unit =
                      MakeUnit(ctx, "llm", llm, first, tp, 0, dp, llm_pp, m, ScheduleKind::kOneFOneB, r, balance);
                  unit.cp = cp;
                  unit.cp_split = CpSplit::kBalanced;  // LPT over the mask's blocks (cost/cp_assignment.h)
                  plan.units.push_back(std::move(unit));
                  return plan;
                });
              }
            }
          }
      }
    }
  });
  // Stages balanced by time put a frozen module's whole weights on few stages
  // (frozen layers are cheap): where no such plan fits (t2v-xl's frozen 72B
  // text encoder), the colocated pipeline is cut by parameters instead, as
  // Megatron-LM cuts, so Cornstarch still plans every model Megatron-LM does.
  if (search.feasible() == 0 && modes.colocated) colocated(Balance::kParams);
  return search.Finish(
      fmt::format(
          "colocated (one pipeline of every module) or modality-parallel (TP x the LLM's "
          "token-balanced CP where documents reach 4096 tokens per rank x each encoder branch's "
          "TP (the LLM's or 1) and pipeline depth x the LLM's depth) x replicas x microbatches x recompute; stages "
          "balanced by {} forward + backward time (colocated by parameters where none fits)",
          balance == Balance::kTime ? "frozen-aware" : "frozen-unaware"),
      DescribeCornstarchPlan);
}

StrategyResult CornstarchStrategy(const StrategyContext& ctx) {
  return CornstarchPlan(ctx, Balance::kTime, "cornstarch");
}

StrategyResult CornstarchUnawareStrategy(const StrategyContext& ctx) {
  return CornstarchPlan(ctx, Balance::kTimeFrozenUnaware, "cornstarch-unaware");
}

}  // namespace loom
