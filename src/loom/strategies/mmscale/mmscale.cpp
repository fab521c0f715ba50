#include "loom/strategies/mmscale/mmscale.h"

#include <fmt/format.h>

#include <numeric>

#include "loom/cost/frozen.h"
#include "loom/cost/layer_pricing.h"
#include "loom/cost/memory.h"
#include "loom/cost/token_stats.h"
#include "loom/error.h"
#include "loom/plan/plan_json.h"
#include "loom/strategies/plan_builders.h"
#include "loom/strategies/search/candidate_search.h"
#include "loom/strategies/search/module_waves.h"
#include "loom/strategies/search/pipeline_grid.h"

namespace loom {

namespace {

// The analytic model ranks allocations; the simulator (communication, real
// stage cuts, memory of the actual microbatches over time) decides. Per
// recomputation level, the best kRanked are simulated in order until
// kSimulatedAllocations of them fit.
constexpr int kRanked = 48;
constexpr int kSimulatedAllocations = 4;

int Gcd(int a, int b) { return b == 0 ? a : Gcd(b, a % b); }

std::string DescribeAllocationPlan(const Plan& p) {
  std::string s;
  for (const auto& u : p.units) {
    const int dp = u.num_replicas() * p.group_gpus / u.tp;
    const int gpus = u.num_groups() * p.group_gpus;
    s += fmt::format("{}{} tp{} dp{} pp{} ({} GPUs)", s.empty() ? "" : "; ", u.name, u.tp, dp, u.pipelines[0].pp, gpus);
  }
  s += fmt::format("; m{} 1f1b, recompute={}", p.units[0].pipelines[0].microbatches,
                   RecomputeName(p.units[0].recompute));
  if (!p.brokers.empty()) {
    s += "; brokers";
    for (const auto& b : p.brokers) s += fmt::format(" {}->{} x{}", b.from, b.to, b.count);
  }
  return s;
}

StrategyResult Search(const StrategyContext& ctx, const std::string& name, bool ratio) {
  const MmscaleUnits units = SplitMmscaleUnits(ctx.model);
  CandidateSearch search(ctx, name);
  // FLOPs per sample of each unit (forward + backward at TP 1), for the
  // ratio-based split.
  std::vector<double> flops;
  const auto tokens = CountModuleTokens(ctx.model, ctx.representative.samples);
  const auto needs = ComputeBackwardNeeds(ctx.model);
  for (const auto& mods : units.modules) {
    double f = 0;
    for (const auto& [mi, li] : UnitLayers(ctx.model, mods)) {
      f += PriceLayer(ctx.model.modules[mi].layers[li], tokens[mi], needs[mi][li], ctx.cluster, {}).flops;
    }
    flops.push_back(f);
  }
  int analytic = 0;
  for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
    const AllocationProblem problem = MakeAllocationProblem(ctx, units, r);
    std::vector<Allocation> allocations = RatioAllocation(problem, flops, kRanked);
    if (!ratio) {
      // Alg. 1's ranking first; the two best ratio splits after it, since
      // they are allocations too and the simulator may prefer them where the
      // analytic model (no communication) misjudges.
      std::vector<Allocation> exact = AllocateResources(problem, kRanked);
      for (size_t i = 0; i < allocations.size() && i < 2; ++i) exact.push_back(allocations[i]);
      allocations = std::move(exact);
    }
    analytic += static_cast<int>(allocations.size());
    search.Expect(static_cast<int64_t>(allocations.size()));  // this recomputation level's
    int fitted = 0;
    const size_t ranked = allocations.size() - (ratio ? 0 : std::min<size_t>(2, allocations.size()));
    for (size_t i = 0; i < allocations.size(); ++i) {
      if (i < ranked && fitted == kSimulatedAllocations) continue;  // skip to the ratio splits
      if (search.Evaluate(AllocationPlan(ctx, name, units, allocations[i], r)) >= 0) ++fitted;
    }
  }
  if (analytic == 0) {
    search.Skip(fmt::format("no TP x DP x PP split of {} GPUs fits every unit in memory under the paper's model",
                            ctx.cluster.num_gpus()));
  }
  return search.Finish(
      fmt::format("{}: TP {{1,2,4,8}} x DP (divisors of the global batch) per unit, {}; per recomputation level "
                  "the allocations best by Eq. 1-2 simulated until {} fit",
                  ratio ? "ratio-based allocation" : "adaptive resource allocation (Alg. 1)",
                  ratio ? "GPUs in proportion to each unit's FLOPs"
                        : "exact GPU split (water-filling, then integer), plus the two best ratio-based splits",
                  kSimulatedAllocations),
      DescribeAllocationPlan);
}

}  // namespace

MmscaleUnits SplitMmscaleUnits(const Model& model) {
  bool has_backbone = false;
  for (const auto& m : model.modules) has_backbone = has_backbone || m.role == ModuleRole::kBackbone;
  MmscaleUnits out;
  auto add = [&](const char* name, std::vector<std::string> modules) {
    if (modules.empty()) return;
    out.names.push_back(name);
    out.modules.push_back(std::move(modules));
  };
  if (!has_backbone) {
    // No module has the backbone role (text-to-video: a text encoder feeding
    // a DiT generator). The largest generator or decoder (by parameters; any
    // module when there is none) plays the backbone; what runs before it is
    // the encoder unit, what runs after it the generator unit.
    auto params = [&](size_t i) {
      int64_t n = 0;
      for (const auto& l : model.modules[i].layers) n += LayerParams(l);
      return n;
    };
    auto generates = [&](size_t i) {
      return model.modules[i].role == ModuleRole::kGenerator || model.modules[i].role == ModuleRole::kDecoder;
    };
    bool any_generator = false;
    for (size_t i = 0; i < model.modules.size(); ++i) any_generator = any_generator || generates(i);
    size_t big = model.modules.size();
    for (size_t i = 0; i < model.modules.size(); ++i) {
      if ((generates(i) || !any_generator) && (big == model.modules.size() || params(i) > params(big))) big = i;
    }
    std::vector<std::string> before, after;
    for (size_t i = 0; i < model.modules.size(); ++i) {
      if (i < big) before.push_back(model.modules[i].name);
      if (i > big) after.push_back(model.modules[i].name);
    }
    add("encoder", before);
    add("backbone", {model.modules[big].name});
    add("generator", after);
    return out;
  }
  const ModuleWaves waves = SplitWaves(model);
  std::vector<std::string> upstream;
  for (const auto& m : model.modules) {
    if (waves.IsUpstream(m.name)) upstream.push_back(m.name);
  }
  add("encoder", upstream);
  add("backbone", waves.backbone);
  add("generator", waves.downstream);
  return out;
}

AllocationProblem MakeAllocationProblem(const StrategyContext& ctx, const MmscaleUnits& units, Recompute recompute) {
  AllocationProblem p;
  p.num_gpus = ctx.cluster.num_gpus();
  p.global_batch = ctx.workload.global_batch;
  p.gpu_mem_bytes = ctx.cluster.usable_mem_bytes();
  p.node_gpus = ctx.cluster.gpus_per_node;
  const double samples = static_cast<double>(ctx.representative.samples.size());
  if (samples <= 0) throw Error("mmscale: the representative batch is empty");
  const auto tokens = CountModuleTokens(ctx.model, ctx.representative.samples);
  const auto needs = ComputeBackwardNeeds(ctx.model);
  // Activations are sized for the largest sample of the batch, not the mean:
  // a microbatch's peak, not its average, must fit (the paper's L is for a
  // fixed-length sequence). Per module: largest tokens / mean tokens.
  std::vector<double> peak_ratio(ctx.model.modules.size(), 1.0);
  {
    std::vector<double> largest(ctx.model.modules.size(), 0.0);
    for (const Sample& s : ctx.representative.samples) {
      const auto t = CountModuleTokens(ctx.model, s);
      for (size_t mi = 0; mi < t.size(); ++mi) largest[mi] = std::max(largest[mi], t[mi].tokens);
    }
    for (size_t mi = 0; mi < largest.size(); ++mi) {
      if (tokens[mi].tokens > 0) peak_ratio[mi] = largest[mi] / (tokens[mi].tokens / samples);
    }
  }
  for (size_t u = 0; u < units.names.size(); ++u) {
    AllocationUnit au;
    au.name = units.names[u];
    au.backbone = au.name == "backbone";
    const auto layers = UnitLayers(ctx.model, units.modules[u]);
    au.max_pp = static_cast<int>(layers.size());
    for (int tp : TpChoices(ctx.cluster)) {
      UnitModel m;
      m.tp = tp;
      double trainable = 0, frozen = 0;
      for (const auto& [mi, li] : layers) {
        const Module& mod = ctx.model.modules[mi];
        const Layer& l = mod.layers[li];
        LayerParallelism par;
        par.tp = tp;
        par.split = SplitsOverTensorParallel(mod, tp);
        par.recompute = recompute;
        // The whole batch priced at once, then per sample: C_u(TP) is the
        // unit's time for one backbone microbatch (one sample) on average.
        const LayerTimes t = PriceLayer(l, tokens[mi], needs[mi][li], ctx.cluster, par);
        m.time_s += (t.forward_s + t.backward_data_s + t.backward_weight_s) / samples;
        m.activation_bytes += t.activation_bytes / samples * peak_ratio[mi];
        const double params = par.split ? LayerParamsOnTpRank(l, tp) : static_cast<double>(LayerParams(l));
        (l.frozen ? frozen : trainable) += params;
      }
      const ModelStateBytes st = ModelState(trainable, frozen, 1, 1);
      m.weight_bytes = st.weights + st.grads;
      m.optimizer_bytes = st.optimizer;
      au.options.push_back(m);
    }
    p.units.push_back(std::move(au));
  }
  return p;
}

Plan AllocationPlan(const StrategyContext& ctx, const std::string& strategy, const MmscaleUnits& units,
                    const Allocation& a, Recompute recompute) {
  int g = 1;
  for (const auto& c : a.units) g = std::max(g, c.tp);
  Plan plan = EmptyPlan(ctx, strategy, g);
  int lm = 0;
  for (size_t u = 0; u < units.names.size(); ++u) {
    if (units.names[u] == "backbone") lm = static_cast<int>(u);
  }
  const int m = static_cast<int>(ctx.workload.global_batch / a.units[lm].dp);
  int first = 0;
  for (size_t u = 0; u < units.names.size(); ++u) {
    const UnitChoice& c = a.units[u];
    const int replicas = c.tp * c.dp / g;  // a group of g GPUs holds g / TP data-parallel ranks
    plan.units.push_back(MakeUnit(ctx, units.names[u], units.modules[u], first, c.tp, 0, replicas, c.pp, m,
                                  ScheduleKind::kOneFOneB, recompute, Balance::kTime));
    first += replicas * c.pp;
  }
  // MMScale §6: gcd(DP_up, DP_down) brokers between adjacent units.
  for (size_t u = 0; u + 1 < units.names.size(); ++u) {
    plan.brokers.push_back({units.names[u], units.names[u + 1], Gcd(a.units[u].dp, a.units[u + 1].dp)});
  }
  return plan;
}

StrategyResult MmscaleStrategy(const StrategyContext& ctx) { return Search(ctx, "mmscale", false); }

StrategyResult MmscaleRatioStrategy(const StrategyContext& ctx) { return Search(ctx, "mmscale-ratio", true); }

StrategyResult MmscaleNoReorderStrategy(const StrategyContext& ctx) {
  StrategyResult r = Search(ctx, "mmscale", false);
  r.plan.strategy = "mmscale-noreorder";
  r.plan.searched += "; batches trained in the loader's order (no data-aware reordering)";
  return r;
}

}  // namespace loom
