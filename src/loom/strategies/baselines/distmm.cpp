// DistMM (NSDI'24) as Mosaic §2 describes it: modules that can run side by
// side (the encoder branches; every independent module of an encoder-only
// model such as CLIP) get disjoint sets of whole GPUs, sized to balance their
// times, with data parallelism inside each set; dependent
// modules run in successive waves on all GPUs (encoders, then the backbone
// with its own TP and PP, then any generator). Searched: GPU group size
// (= backbone TP), backbone PP, microbatches, recomputation, and the branch
// split (time-proportional, then every one-group move from it).
#include <algorithm>
#include <numeric>

#include "loom/error.h"
#include "loom/strategies/baselines/baselines.h"
#include "loom/strategies/plan_builders.h"
#include "loom/strategies/search/candidate_search.h"
#include "loom/strategies/search/module_waves.h"
#include "loom/strategies/search/pipeline_grid.h"

namespace loom {

namespace {

// Splits `groups` among branches in proportion to `weights` (largest
// remainder, at least one each).
std::vector<int> ProportionalSplit(const std::vector<double>& weights, int groups) {
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  const int b = static_cast<int>(weights.size());
  std::vector<int> out(b, 1);
  int left = groups - b;
  std::vector<std::pair<double, int>> rem;
  for (int i = 0; i < b; ++i) {
    double share = total > 0 ? weights[i] / total * (groups - b) : 0.0;
    out[i] += static_cast<int>(share);
    left -= static_cast<int>(share);
    rem.push_back({share - static_cast<int>(share), -i});
  }
  std::sort(rem.rbegin(), rem.rend());
  for (int i = 0; i < left; ++i) ++out[-rem[i % b].second];
  return out;
}

// An encoder-only model (CLIP, ImageBind: no backbone) has no upstream wave;
// its independent modules (connected through inputs) are DistMM's branches,
// with nothing after them: the case DistMM was built for.
ModuleWaves BranchesOfEncoderOnlyModel(const Model& model, ModuleWaves waves) {
  if (!waves.upstream_branches.empty() || !waves.downstream.empty()) return waves;
  for (const auto& m : model.modules) {
    if (m.role == ModuleRole::kBackbone) return waves;
  }
  const int n = static_cast<int>(model.modules.size());
  std::vector<int> component(n);
  std::iota(component.begin(), component.end(), 0);
  for (int i = 0; i < n; ++i) {
    for (int j : model.modules[i].inputs) {
      const int from = component[i], to = component[j];
      for (int& c : component) c = c == from ? to : c;
    }
  }
  std::vector<int> order;  // components in first-module order
  for (int i = 0; i < n; ++i) {
    if (std::find(order.begin(), order.end(), component[i]) == order.end()) order.push_back(component[i]);
  }
  if (order.size() < 2) return waves;
  ModuleWaves out;
  for (int c : order) {
    out.upstream_branches.emplace_back();
    for (int i = 0; i < n; ++i) {
      if (component[i] == c) out.upstream_branches.back().push_back(model.modules[i].name);
    }
  }
  return out;
}

}  // namespace

StrategyResult DistMmStrategy(const StrategyContext& ctx) {
  CandidateSearch search(ctx, "distmm");
  const ModuleWaves waves = BranchesOfEncoderOnlyModel(ctx.model, SplitWaves(ctx.model));
  const bool has_backbone = !waves.backbone.empty();
  const int n = ctx.cluster.num_gpus();
  const int branches = static_cast<int>(waves.upstream_branches.size());
  std::vector<double> branch_time;
  for (const auto& b : waves.upstream_branches) {
    const auto w = LayerWeights(ctx, UnitLayers(ctx.model, b), Balance::kTime, 1);
    branch_time.push_back(std::accumulate(w.begin(), w.end(), 0.0));
  }
  const int backbone_layers = static_cast<int>(UnitLayers(ctx.model, waves.backbone).size());
  auto grid = [&] {
    for (int g : TpChoices(ctx.cluster)) {
      if (n % g != 0) continue;
      const int groups = n / g;
      if (groups < std::max(branches, 1)) continue;
      // Branch splits: proportional to time, and every single-group move from it.
      std::vector<std::vector<int>> splits;
      if (branches > 0) {
        auto base = ProportionalSplit(branch_time, groups);
        splits.push_back(base);
        for (int a = 0; a < branches; ++a) {
          for (int b = 0; b < branches; ++b) {
            if (a == b || base[a] <= 1) continue;
            auto s = base;
            --s[a];
            ++s[b];
            splits.push_back(s);
          }
        }
      } else {
        splits.push_back({});
      }
      for (int pp : Divisors(groups)) {
        if (pp > std::max(backbone_layers, 1)) break;
        const int dp = groups / pp;
        for (int m : Divisors(ctx.workload.global_batch)) {
          if (m < pp && m != static_cast<int>(ctx.workload.global_batch)) continue;
          for (const auto& split : splits) {
            // Encoder branches: data parallel (TP 1 or the group's TP), or pipelined
            // like the backbone when they are too big for one group.
            for (int enc : {0, 1, 2}) {
              if ((enc == 1 && g == 1) || (enc == 2 && pp == 1) || (enc > 0 && branches == 0)) continue;
              // Downstream modules: data parallel per group, or the backbone's TP and PP.
              for (int down : {0, 1}) {
                if (down == 1 && waves.downstream.empty()) continue;
                // Every unit's replicas need a sample of each microbatch
                // (ValidatePlan): a plan with more would be built only to be
                // refused, thousands of times on a big cluster.
                int most_replicas = has_backbone ? dp : 0;
                for (int b = 0; b < branches; ++b)
                  most_replicas = std::max(most_replicas, split[b] / (enc == 2 ? pp : 1));
                if (has_backbone && !waves.downstream.empty())
                  most_replicas = std::max(most_replicas, down == 0 ? groups : dp);
                if (most_replicas > ctx.workload.global_batch / m) continue;
                // Stages balanced by time; by parameters when those do not fit.
                auto make = [&](Balance balance) {
                  return [&, balance](Recompute r) {
                    Plan plan = EmptyPlan(ctx, "distmm", g);
                    const bool has_down = !waves.downstream.empty();
                    int first = 0;
                    for (int b = 0; b < branches; ++b) {
                      const int bpp = enc == 2 ? pp : 1;
                      if (split[b] % bpp != 0) throw Error("branch split not divisible by pp");
                      plan.units.push_back(MakeUnit(ctx, "branch" + std::to_string(b), waves.upstream_branches[b],
                                                    first, enc == 0 ? 1 : g, 0, split[b] / bpp, bpp, m,
                                                    ScheduleKind::kGpipe, r, balance));
                      first += split[b];
                    }
                    const int phase = branches > 0 ? 1 : 0;
                    if (!has_backbone) return plan;  // an encoder-only model: the branches are all of it
                    plan.units.push_back(MakeUnit(ctx, "backbone", waves.backbone, 0, g, phase, dp, pp, m,
                                                  has_down ? ScheduleKind::kGpipe : ScheduleKind::kOneFOneB, r,
                                                  balance));
                    if (has_down) {
                      plan.units.push_back(down == 0 ? MakeUnit(ctx, "downstream", waves.downstream, 0, 1, phase + 1,
                                                                groups, 1, m, ScheduleKind::kOneFOneB, r, balance)
                                                     : MakeUnit(ctx, "downstream", waves.downstream, 0, g, phase + 1,
                                                                dp, pp, m, ScheduleKind::kOneFOneB, r, balance));
                    }
                    return plan;
                  };
                };
                search.TryEither(make(Balance::kTime), make(Balance::kParams));
              }
            }
          }
        }
      }
    }
  };
  search.Run(grid);
  return search.Finish(
      "group size x backbone pp x microbatches x recompute x branch GPU split; parallel branches on "
      "disjoint whole GPUs, waves on all GPUs",
      [](const Plan& p) {
        std::string s;
        for (const auto& u : p.units) {
          s += (s.empty() ? "" : "; ") + u.name + " " +
               (u.num_groups() == 1 && u.pipelines[0].pp == 1 ? "1 group" : DescribeUnit(u, p.group_gpus));
        }
        return s;
      });
}

}  // namespace loom
