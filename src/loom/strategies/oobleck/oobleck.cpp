#include "loom/strategies/oobleck/oobleck.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "loom/cost/layer_pricing.h"
#include "loom/cost/memory.h"
#include "loom/cost/module_summary.h"
#include "loom/cost/token_stats.h"
#include "loom/error.h"
#include "loom/pipeline/partition.h"
#include "loom/plan/plan_json.h"
#include "loom/strategies/plan_builders.h"
#include "loom/strategies/search/candidate_search.h"

namespace loom {

using namespace oobleck;

int OobleckMinNodes(const StrategyContext& ctx) {
  const double state = ModelStateTotalBytes(ctx.model, ctx.workload.precision);
  const double node = 0.8 * ctx.cluster.usable_mem_bytes() * ctx.cluster.gpus_per_node;
  return std::max(1, static_cast<int>(std::ceil(state / node)));
}

LayerCosts OobleckLayerCosts(const StrategyContext& ctx, int microbatch_samples, Recompute recompute,
                             LayerMemory* memory) {
  const Model& model = ctx.model;
  const auto tokens = CountModuleTokens(model, ctx.representative.samples);
  const auto needs = ComputeBackwardNeeds(model);
  const int batch = std::max<int>(1, static_cast<int>(ctx.representative.samples.size()));
  const int microbatches = std::max(1, batch / microbatch_samples);
  const int M = ctx.cluster.gpus_per_node;
  const double inf = std::numeric_limits<double>::infinity();
  LayerCosts out;
  if (memory) {
    *memory = {};
    memory->capacity_bytes = 0.9 * ctx.cluster.usable_mem_bytes();
  }
  for (size_t mi = 0; mi < model.modules.size(); ++mi) {
    const Module& mod = model.modules[mi];
    for (size_t li = 0; li < mod.layers.size(); ++li) {
      const Layer& layer = mod.layers[li];
      const double params = static_cast<double>(LayerParams(layer));
      const bool frozen = mod.frozen || layer.frozen;
      out.time_s.emplace_back();
      if (memory) {
        memory->state_bytes.emplace_back();
        memory->activation_bytes.emplace_back();
      }
      for (int d = 1; d <= M; ++d) {
        if (d > microbatch_samples) {  // fewer whole sequences than GPUs to share them
          out.time_s.back().push_back(inf);
          if (memory) {
            memory->state_bytes.back().push_back(inf);
            memory->activation_bytes.back().push_back(inf);
          }
          continue;
        }
        LayerParallelism par;
        par.tp = 1;
        par.precision = ctx.workload.precision;
        par.recompute = recompute;
        // One microbatch's share on each of the stage's d GPUs.
        const TokenStats share = ShareOfSequences(tokens[mi], microbatches * d);
        const LayerTimes t = PriceLayer(layer, share, needs[mi][li], ctx.cluster, par);
        out.time_s.back().push_back(t.forward_s + t.backward_data_s + t.backward_weight_s);
        if (memory) {
          // As the simulator keeps it: ZeRO-1 over the stage's GPUs (one replica: the least sharding).
          memory->state_bytes.back().push_back(
              ModelState(frozen ? 0 : params, frozen ? params : 0, d, 1, ctx.workload.precision).total());
          memory->activation_bytes.back().push_back(t.activation_bytes);
        }
      }
    }
  }
  return out;
}

namespace {

constexpr size_t kExact = 64;

// b: the given size, else every power of two dividing the batch up to a
// node's GPUs or B / (4 x GPUs), whichever is larger (wider stages need more
// samples per microbatch; more microbatches fill pipelines better).
std::vector<int> MicrobatchSamples(const StrategyContext& ctx, const OobleckOptions& options) {
  const int64_t B = ctx.workload.global_batch;
  if (options.microbatch_samples > 0) {
    if (B % options.microbatch_samples != 0) {
      throw Error(fmt::format("oobleck: microbatches of {} samples do not divide the global batch of {}",
                              options.microbatch_samples, B));
    }
    return {options.microbatch_samples};
  }
  // Up to a node's GPUs (a stage as wide as a node needs that many), and
  // beyond while every GPU can still get 4 microbatches (larger microbatches
  // run more efficiently; 1-GPU nodes would otherwise train one sample at a time).
  const int64_t upper = std::max<int64_t>(ctx.cluster.gpus_per_node, B / (4 * ctx.cluster.num_gpus()));
  std::vector<int> out;
  for (int b = 1; b <= upper && B % b == 0; b *= 2) out.push_back(b);
  return out;
}

}  // namespace

Plan BuildOobleckPlan(const StrategyContext& ctx, const OobleckSolution& sol) {
  // Groups of the largest GPU count dividing every stage's (it divides a
  // node: a node's stages sum to it): a template whose stages all have the
  // same width runs one group per stage, which the runtime runs; mixed
  // widths need ranks spanning several groups, which it does not yet.
  int group = 0;
  for (size_t j = 0; j < sol.templates.size(); ++j) {
    if (sol.instantiation[j] == 0) continue;
    for (const auto& s : sol.templates[j].stages) group = std::gcd(group, s.gpus);
  }
  Plan plan = EmptyPlan(ctx, "oobleck", std::max(1, group));
  Unit u;
  u.name = "all";
  for (const auto& m : ctx.model.modules) u.modules.push_back(m.name);
  const auto layers = UnitLayers(ctx.model, u.modules);
  // Larger templates first: pipelines lie on consecutive whole nodes.
  for (int j = static_cast<int>(sol.templates.size()) - 1; j >= 0; --j) {
    if (sol.instantiation[j] == 0) continue;
    const PipelineTemplate& t = sol.templates[j];
    PipelineSpec ps;
    ps.replicas = sol.instantiation[j];
    ps.pp = t.num_stages();
    ps.microbatches = sol.batch.microbatches[j];
    ps.schedule = ScheduleKind::kOneFOneB;
    Partition part;
    for (const auto& s : t.stages) {
      part.begin.push_back(s.begin);
      part.stage_cost.push_back(s.time_s);
      part.max_cost = std::max(part.max_cost, s.time_s);
      ps.rank_groups.push_back(s.gpus / plan.group_gpus);
    }
    part.begin.push_back(static_cast<int>(layers.size()));
    ps.stages = StagesFromPartition(ctx.model, layers, part, ps.pp);
    u.pipelines.push_back(std::move(ps));
  }
  plan.units.push_back(std::move(u));
  return plan;
}

std::vector<OobleckSolution> SolveOobleck(const StrategyContext& ctx, const OobleckOptions& options) {
  const int N = ctx.cluster.nodes, f = options.fault_tolerance;
  const int n0 = OobleckMinNodes(ctx);
  std::vector<std::string> all;
  for (const auto& m : ctx.model.modules) all.push_back(m.name);
  const int L = static_cast<int>(UnitLayers(ctx.model, all).size());
  // Template sizes for a cluster of `nodes` (§2.4.1.1), none with more nodes than layers.
  auto sizes_for = [&](int nodes) {
    TemplateSizes t = TemplateNodeCounts(nodes, f, n0);
    while (!t.nodes.empty() && t.nodes.back() > L) t.nodes.pop_back();
    return t;
  };
  const TemplateSizes sizes = sizes_for(N);
  if (sizes.nodes.empty()) {
    throw Error(fmt::format("oobleck: {} layers cannot fill a template of {} nodes (n0: the training state needs {})",
                            L, n0, n0));
  }
  // Eq. 2.5 enumerates every instantiation, which explodes on thousands of
  // nodes: say how far this model goes, found by bisection on the
  // enumeration's size (which grows with the nodes), before building any.
  constexpr int64_t kMaxInstantiations = 200000;
  auto too_many = [&](int nodes) {
    return EnumerationSize(nodes, sizes_for(nodes).nodes, kMaxInstantiations + 1) > kMaxInstantiations;
  };
  if (too_many(N)) {
    int lo = (f + 1) * n0, hi = N;  // too_many(hi); lo is the fewest nodes a plan needs
    if (too_many(lo)) lo = 0;
    while (lo > 0 && hi - lo > 1) {
      const int mid = lo + (hi - lo) / 2;
      (too_many(mid) ? hi : lo) = mid;
    }
    throw Error(fmt::format(
        "oobleck: {} nodes split into {} pipeline templates ({}-{} nodes) in too many ways to "
        "enumerate and rank (Eq. 2.5 builds more than {} vectors){}",
        N, sizes.nodes.size(), sizes.nodes.front(), sizes.nodes.back(), kMaxInstantiations,
        lo > 0 ? fmt::format("; for {} (f = {}) it plans clusters of up to {} nodes", ctx.model.name, f, lo) : ""));
  }
  const auto xs = FeasibleInstantiations(N, sizes, kMaxInstantiations);
  if (xs.empty()) {
    throw Error(fmt::format("oobleck: {} nodes do not split into {} or more pipelines of {}-{} nodes", N, f + 1,
                            sizes.nodes.front(), sizes.nodes.back()));
  }
  std::vector<OobleckSolution> ranked;
  std::string why;
  int64_t subproblems = 0;
  // Per microbatch size and recomputation (the planner's times and memory
  // depend on both), templates of every size, then every instantiation.
  for (int b : MicrobatchSamples(ctx, options)) {
    const int total = static_cast<int>(ctx.workload.global_batch / b);
    for (Recompute r : {Recompute::kNone, Recompute::kFull}) {
      // A pinned level: its templates are priced with full recomputation when
      // pinned to it, without otherwise (CandidateSearch applies the pin).
      if (ctx.fixed_recompute && (r == Recompute::kFull) != (*ctx.fixed_recompute == Recompute::kFull)) continue;
      LayerMemory memory;
      const LayerCosts costs = OobleckLayerCosts(ctx, b, r, &memory);
      TemplatePlanner planner(costs, ctx.cluster.gpus_per_node, memory);
      std::vector<PipelineTemplate> templates;
      std::vector<bool> has;
      for (int n : sizes.nodes) {
        try {
          templates.push_back(planner.Plan(n));
          has.push_back(true);
        } catch (const Error& e) {
          why = fmt::format("microbatches of {}, recompute {}: {}", b, RecomputeName(r), e.what());
          templates.push_back({});
          has.push_back(false);
        }
      }
      subproblems += planner.memo_entries();
      std::vector<double> per_mb(sizes.nodes.size(), 0);
      for (size_t j = 0; j < templates.size(); ++j) {
        for (const auto& s : templates[j].stages) per_mb[j] = std::max(per_mb[j], s.time_s);
      }
      // Eq. 2.6 exactly for the kExact instantiations with the best
      // continuous estimate (every pipeline's N T equal to c = M / Σ x_j /
      // T_j, plus its fill and drain): thousands of instantiations on 30
      // nodes, each a small integer program.
      std::vector<std::pair<double, size_t>> order;
      for (size_t i = 0; i < xs.size(); ++i) {
        double inv = 0, fill = 0;
        bool ok = true;
        for (size_t j = 0; j < xs[i].size(); ++j) {
          if (xs[i][j] == 0) continue;
          if (!has[j]) ok = false;
          if (!ok) break;
          inv += xs[i][j] / per_mb[j];
          fill = std::max(fill, templates[j].IterationTime_s(0));
        }
        if (ok) order.push_back({total / inv + fill, i});
      }
      std::sort(order.begin(), order.end());
      if (order.size() > kExact) order.resize(kExact);
      for (const auto& [estimate, i] : order) {
        const auto& x = xs[i];
        OobleckSolution sol;
        try {
          sol.batch = DistributeBatch(x, per_mb, total);
        } catch (const Error& e) {
          // The nearest global batches that split over these pipelines.
          const auto [up, down] = NearestDistributable(x, total);
          why = fmt::format("{} (microbatches of {}: a global batch of {}{} would split)", e.what(), b,
                            static_cast<int64_t>(up) * b, down > 0 ? fmt::format(" or {}", int64_t{down} * b) : "");
          continue;
        }
        sol.instantiation = x;
        sol.templates = templates;
        sol.microbatch_samples = b;
        sol.recompute = r;
        for (size_t j = 0; j < x.size(); ++j) {
          if (x[j] > 0) {
            sol.estimated_s = std::max(sol.estimated_s, templates[j].IterationTime_s(sol.batch.microbatches[j]));
          }
        }
        ranked.push_back(std::move(sol));
      }
    }
  }
  if (ranked.empty()) {
    throw Error(
        fmt::format("oobleck: no instantiation of {} nodes with >= {} pipelines has templates that fit and "
                    "a batch split: {}",
                    N, f + 1, why));
  }
  // Fastest estimate first; ties: fewer pipelines, then the vector (deterministic).
  std::stable_sort(ranked.begin(), ranked.end(), [](const OobleckSolution& a, const OobleckSolution& b) {
    if (a.estimated_s != b.estimated_s) return a.estimated_s < b.estimated_s;
    const int pa = std::accumulate(a.instantiation.begin(), a.instantiation.end(), 0);
    const int pb = std::accumulate(b.instantiation.begin(), b.instantiation.end(), 0);
    if (pa != pb) return pa < pb;
    return a.instantiation < b.instantiation;
  });
  const int count = static_cast<int>(ranked.size());
  if (static_cast<int>(ranked.size()) > options.simulated) ranked.resize(options.simulated);
  for (auto& sol : ranked) {
    sol.sizes = sizes;
    sol.instantiations = count;
    sol.plan = BuildOobleckPlan(ctx, sol);
    sol.plan.units[0].recompute = sol.recompute;
    sol.plan.searched = fmt::format(
        "templates of {}-{} nodes (n0 = {}, f = {}) by divide and conquer over the 1F1B critical path (N_b = 4S', "
        "memory per stage; {} sub-problems over microbatches of {} samples x recompute none/full), {} "
        "instantiations with >= {} pipelines (Eq. 2.5), batch by Eq. 2.6, the best {} simulated",
        sizes.nodes.front(), sizes.nodes.back(), n0, f, subproblems, fmt::join(MicrobatchSamples(ctx, options), "/"),
        count, f + 1, ranked.size());
  }
  return ranked;
}

namespace {

std::string DescribeOobleckPlan(const Plan& p) {
  std::string s;
  for (const auto& ps : p.units[0].pipelines) {
    int gpus = 0;
    for (int g : ps.rank_groups) gpus += g * p.group_gpus;
    s +=
        fmt::format("{}{} x (pp{} on {} GPUs, m{})", s.empty() ? "" : " + ", ps.replicas, ps.pp, gpus, ps.microbatches);
  }
  return s + fmt::format("{} rc={}", p.units[0].zero_stage == 3 ? " fsdp" : "", RecomputeName(p.units[0].recompute));
}

}  // namespace

StrategyResult OobleckStrategy(const StrategyContext& ctx) {
  OobleckOptions options;
  options.fault_tolerance = ctx.fault_tolerance;
  const std::vector<OobleckSolution> solutions = SolveOobleck(ctx, options);
  CandidateSearch search(ctx, "oobleck");
  // Every pipeline keeps whole layers with their optimizer state (zero_stage
  // 0): what lets a survivor hand a failed node's layers on (§2.5), and what
  // `loom run --fault-tolerance` needs. Only when none of the plans fits so,
  // they shard them as Oobleck's implementation does (FSDP inside a stage,
  // ZeRO-3), which the runtime does not run across heterogeneous templates yet.
  for (int zero : {0, 3}) {
    for (const OobleckSolution& sol : solutions) {
      search.Try([&](Recompute r) {
        Plan p = sol.plan;
        p.units[0].recompute = std::max(r, sol.recompute);
        p.units[0].zero_stage = zero;
        return p;
      });
    }
    if (search.feasible() > 0) break;
  }
  StrategyResult r = search.Finish(solutions.front().plan.searched, DescribeOobleckPlan);
  r.config = fmt::format("f={} {}", ctx.fault_tolerance, r.config);
  return r;
}

}  // namespace loom
