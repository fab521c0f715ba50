#include "loom/strategies/entrain/entrain.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <tuple>

#include "loom/cost/frozen.h"
#include "loom/cost/layer_pricing.h"
#include "loom/cost/memory.h"
#include "loom/cost/token_stats.h"
#include "loom/data/sample_source.h"
#include "loom/error.h"
#include "loom/strategies/entrain/config_search.h"
#include "loom/strategies/entrain/cost_fit.h"
#include "loom/strategies/entrain/deferral_schedule.h"
#include "loom/strategies/entrain/dp_assignment.h"
#include "loom/strategies/entrain/profiling_batch.h"
#include "loom/strategies/entrain/stratified_assignment.h"
#include "loom/strategies/plan_builders.h"
#include "loom/strategies/search/candidate_search.h"
#include "loom/strategies/search/module_waves.h"
#include "loom/strategies/search/pipeline_grid.h"

namespace loom {

namespace {

uint64_t DrawSeed(Rng& rng) { return static_cast<uint64_t>(rng.Uniform() * 0x1.0p53); }

// Algorithm 2's parameters (§4.4.2): 95% confidence, 5% error, sizes doubling
// from one sample; a dataset that needs more than kMaxProfilingSamples has no
// stable allocation worth the name.
constexpr double kAlpha = 0.05;
constexpr double kPError = 0.05;
constexpr int64_t kMaxProfilingSamples = 8192;
// The analytic ranking (Eq. 4.2) orders candidates within each (DP, group)
// choice; Eq. 4.2 prices neither the gradient all-reduce nor activations, so
// across DP choices the simulator (with the per-batch deferral schedule and
// Loom's memory model) decides: candidates are tried round-robin over the
// (DP, group) choices, each choice's best first, until kConfirmed fit (at
// most kSimulated tried).
constexpr int kConfirmed = 6;
constexpr int kSimulated = 24;

const std::vector<std::string>& Names() {
  static const std::vector<std::string> names = {"encoder", "llm"};
  return names;
}

// Per module of the given units: the token statistics of one mean microbatch of `mu` samples.
std::vector<TokenStats> MeanMicrobatchTokens(const Model& model, const std::vector<Sample>& samples, int64_t mu) {
  std::vector<TokenStats> t = CountModuleTokens(model, samples);
  const double scale = static_cast<double>(mu) / static_cast<double>(samples.size());
  for (auto& s : t) s *= scale;
  return t;
}

// Eq. 4.1's T_{j,i} and each layer's model states, for one component at (tp, cp).
ComponentOption PriceComponent(const Model& model, const Cluster& cluster, const Workload& w,
                               const std::vector<std::string>& modules, const std::vector<TokenStats>& tokens, int tp,
                               int cp, int dp) {
  ComponentOption o;
  o.tp = tp;
  o.cp = cp;
  const auto needs = ComputeBackwardNeeds(model);
  for (const auto& [mi, li] : UnitLayers(model, modules)) {
    const Module& mod = model.modules[mi];
    const Layer& layer = mod.layers[li];
    LayerParallelism par;
    par.tp = tp;
    par.cp = cp;
    par.split = SplitsOverTensorParallel(mod, tp);
    const QuadraticCost q = FitLayerCost(layer, needs[mi][li], cluster, par);  // §4.4.1
    const TokenStats& t = tokens[mi];
    o.layer_s.push_back(CurveTime(q, t));
    const double params = par.split ? LayerParamsOnTpRank(layer, tp) : static_cast<double>(LayerParams(layer));
    const ModelStateBytes st =
        ModelState(layer.frozen ? 0 : params, layer.frozen ? params : 0, dp, w.zero_stage, w.precision);
    o.state_bytes.push_back(st.weights + st.grads + st.optimizer);
  }
  return o;
}

struct Candidate {
  int dp = 1, group = 1;
  std::vector<int> gpus;  // M_i per replica
  ProfilingBatch profiling;
  EntrainConfig config;
  double cluster_throughput() const { return dp * config.throughput; }
};

// A component's unit, its stages Eq. 4.1's cut (config_search.h).
Unit MakeEntrainUnit(const StrategyContext& ctx, const std::string& name, const std::vector<std::string>& modules,
                     int first_group, const ComponentChoice& c, int dp, int microbatches, Recompute recompute) {
  Partition part;
  part.begin.push_back(0);
  for (int n : c.stage_layers) part.begin.push_back(part.begin.back() + n);
  part.stage_cost = c.stage_s;
  Unit u = MakeUnit(ctx, name, modules, first_group, c.tp, 0, dp, c.pp, microbatches, ScheduleKind::kOneFOneB,
                    recompute, part);
  u.cp = c.cp;
  u.zero_stage = ctx.workload.zero_stage;
  return u;
}

std::string DescribeEntrainPlan(const Plan& p) {
  std::string s;
  for (const auto& u : p.units) {
    s += fmt::format("{}{} tp{}{} pp{}", s.empty() ? "" : "; ", u.name, u.tp,
                     u.cp > 1 ? fmt::format(" cp{}", u.cp) : "", u.pipelines[0].pp);
  }
  const Unit& u0 = p.units[0];
  return s + fmt::format("; dp{} m{} deferral-aware 1f1b, recompute={}", u0.num_replicas(),
                         u0.pipelines[0].microbatches, RecomputeName(u0.recompute));
}

}  // namespace

EntrainUnits SplitEntrainUnits(const Model& model) {
  const ModuleWaves waves = SplitWaves(model);
  EntrainUnits out;
  for (const auto& m : model.modules) (waves.IsUpstream(m.name) ? out.encoder : out.llm).push_back(m.name);
  if (out.encoder.empty()) {
    throw Error(
        fmt::format("model {} has no module upstream of its backbone; Entrain balances an encoder against "
                    "an LLM (valid: a multimodal model with an encoder)",
                    model.name));
  }
  if (out.llm.empty()) throw Error(fmt::format("entrain: model {} has no backbone", model.name));
  return out;
}

std::vector<double> MacroscopicProportions(const Model& model, const LayerCurves& curves,
                                           const std::vector<Sample>& samples) {
  std::vector<std::vector<TokenStats>> tokens;
  tokens.reserve(samples.size());
  for (const Sample& s : samples) tokens.push_back(CountModuleTokens(model, s));
  return MacroscopicProportions(curves, tokens);
}

std::vector<double> MacroscopicProportions(const LayerCurves& curves,
                                           const std::vector<std::vector<TokenStats>>& sample_tokens) {
  double enc = 0, llm = 0;
  for (const auto& tokens : sample_tokens) {
    const SampleWork w = SampleWorkOf(curves, tokens);
    enc += w.encoder;
    llm += w.llm;
  }
  const double total = enc + llm;
  if (total <= 0) return {0.5, 0.5};
  return {enc / total, llm / total};
}

std::vector<int> ModuleTensorParallel(const Model& model, const Plan& plan) {
  std::vector<int> tp(model.modules.size(), 1);
  for (const Unit& u : plan.units) {
    for (const auto& name : u.modules) {
      const int m = model.FindModule(name);
      if (m >= 0) tp[m] = u.tp;
    }
  }
  return tp;
}

IterationSchedule EntrainScheduleBatch(const Model& model, const Plan& plan, const Batch& batch, int64_t iteration,
                                       const LayerCurves& curves, const EntrainScheduleOptions& options) {
  const int e = plan.FindUnit("encoder"), l = plan.FindUnit("llm");
  if (e < 0 || l < 0 || plan.units.size() != 2) {
    throw Error(fmt::format("entrain: plan {} must have exactly the units encoder and llm", plan.strategy));
  }
  const Unit& enc = plan.units[e];
  const Unit& llm = plan.units[l];
  for (const Unit* u : {&enc, &llm}) {
    if (u->pipelines.size() != 1 || static_cast<int>(u->pipelines[0].stages.size()) != u->pipelines[0].pp) {
      throw Error(fmt::format("entrain: unit {} must run one pipeline template without interleaving", u->name));
    }
  }
  const int D = enc.num_replicas();
  if (llm.num_replicas() != D) {
    throw Error(fmt::format("entrain: units encoder and llm have {} and {} replicas; Entrain shares one DP", D,
                            llm.num_replicas()));
  }
  const int K = enc.pipelines[0].microbatches;
  const int pe = enc.pipelines[0].pp, pl = llm.pipelines[0].pp, depth = pe + pl;
  std::vector<SampleWork> works;
  std::vector<double> llm_work;
  for (const Sample& s : batch.samples) {
    works.push_back(SampleWorkOf(model, curves, s));
    llm_work.push_back(works.back().llm);
  }
  IterationSchedule it;
  it.iteration = iteration;
  it.microbatch_samples.assign(K, {});
  auto& enc_mbs = it.replica_microbatch_samples["encoder"];
  auto& llm_mbs = it.replica_microbatch_samples["llm"];
  auto& enc_orders = it.unit_rank_orders["encoder"];
  auto& llm_orders = it.unit_rank_orders["llm"];
  for (const auto& mine : DpAssignment(works, D)) {  // §4.3
    std::vector<SampleWork> local;
    for (int x : mine) local.push_back(works[x]);
    const StratifiedMicrobatches strat = StratifiedAssignment(local, K);  // §4.5.1
    std::vector<std::vector<int>> mbs;
    for (const auto& mb : strat.microbatches) {
      mbs.emplace_back();
      for (int x : mb) mbs.back().push_back(mine[x]);
    }
    DeferralPlan deferral;
    if (options.deferral) {
      deferral = PairwiseDeferral(mbs, llm_work);  // §4.5.2
    } else {
      deferral.order.resize(mbs.size());
      std::iota(deferral.order.begin(), deferral.order.end(), 0);
    }
    const ReplicaDeferralSchedule rs = SplitForDeferral(mbs, deferral);
    std::vector<int> fslot, bslot, slot;
    enc_mbs.emplace_back();
    for (const EncoderPiece& p : rs.pieces) {
      enc_mbs.back().push_back(p.samples);
      fslot.push_back(p.forward_slot);
      bslot.push_back(p.backward_slot);
    }
    llm_mbs.push_back(rs.llm_microbatches);
    for (int k = 0; k < rs.slots(); ++k) {
      slot.push_back(k);
      auto& g = it.microbatch_samples[std::min(k, K - 1)];
      g.insert(g.end(), rs.llm_microbatches[k].begin(), rs.llm_microbatches[k].end());
    }
    // §4.5.3: split backward and eager forward, 1F1B counted in slots.
    enc_orders.emplace_back();
    for (int r = 0; r < pe; ++r) {
      enc_orders.back().push_back(
          SlotOneFOneB(fslot, bslot, depth - r - 1 + options.eager_slots, r, options.zero_bubble ? r : -1));
    }
    llm_orders.emplace_back();
    for (int r = 0; r < pl; ++r) {
      llm_orders.back().push_back(SlotOneFOneB(slot, slot, depth - (pe + r) - 1, r, options.zero_bubble ? pe + r : -1));
    }
  }
  return it;
}

IterationSchedule EntrainScheduler::Schedule(const StrategyContext& context, const Plan& plan, const Batch& batch,
                                             int64_t iteration) {
  const std::vector<int> tp = ModuleTensorParallel(context.model, plan);
  if (tp != tp_ || curves_.curves.empty()) {
    curves_ = FitModelCurves(context.model, context.cluster, tp);
    tp_ = tp;
  }
  return EntrainScheduleBatch(context.model, plan, batch, iteration, curves_, options_);
}

StrategyResult EntrainStrategy(const StrategyContext& ctx) {
  const EntrainUnits units = SplitEntrainUnits(ctx.model);
  const std::vector<std::vector<std::string>> comps = {units.encoder, units.llm};
  const int N = ctx.cluster.num_gpus();
  const int64_t B = ctx.workload.global_batch, mu = ctx.workload.microbatch_size;
  const auto source = MakeSampleSource(ctx.workload.source);
  // Macroscopic proportions priced at the group's TP (the encoder and the
  // LLM scale differently with it), curves fitted once per TP.
  std::map<int, LayerCurves> curves_at;
  int curves_tp = 0;  // the TP whose proportions Algorithm 2 is asked for
  // Algorithm 2 draws the same batches (same seed, sizes and trials) for
  // every DP degree and TP: each is drawn and its tokens counted once, and
  // its proportions computed then for every TP (a few numbers per draw kept,
  // not the samples).
  std::vector<int> tps;
  for (int g : TpChoices(ctx.cluster)) {
    if (ctx.fixed_tp <= 0 || g == ctx.fixed_tp) tps.push_back(g);
  }
  auto curves_of = [&](int g) -> const LayerCurves& {
    auto [pos, fresh] = curves_at.try_emplace(g);
    if (fresh) pos->second = FitModelCurves(ctx.model, ctx.cluster, std::vector<int>(ctx.model.modules.size(), g));
    return pos->second;
  };
  std::map<std::tuple<int, int64_t, uint64_t>, std::vector<double>> proportions_of;
  auto proportions = [&](int64_t n, Rng& rng) {
    const uint64_t seed = DrawSeed(rng);
    if (!proportions_of.count({curves_tp, n, seed})) {
      std::vector<std::vector<TokenStats>> tokens;
      for (const Sample& s : source->Draw(n, seed, 0).samples) tokens.push_back(CountModuleTokens(ctx.model, s));
      for (int g : tps) proportions_of[{g, n, seed}] = MacroscopicProportions(curves_of(g), tokens);
    }
    return proportions_of.at({curves_tp, n, seed});
  };
  std::vector<Candidate> candidates;
  std::string skipped;
  for (int dp : Divisors(N)) {
    if (ctx.fixed_dp > 0 && dp != ctx.fixed_dp) continue;
    if (B % (dp * mu) != 0) continue;  // Algorithm 3 line 5
    const int per_replica = N / dp;
    const int K = static_cast<int>(B / (dp * mu));
    for (int g : tps) {
      if (per_replica % g != 0 || per_replica / g < 2) continue;
      curves_tp = g;
      Candidate c;
      c.dp = dp;
      c.group = g;
      try {  // Algorithm 2: b_min and its allocation M
        c.profiling = StableProfilingBatch(proportions, per_replica, g, kAlpha, kPError, 1, kMaxProfilingSamples,
                                           ctx.workload.seed);
      } catch (const Error& e) {
        skipped = e.what();
        continue;
      }
      // Tier 1 costs at the mean microbatch of a b_min batch.
      Rng rng(Rng::Mix(ctx.workload.seed, 1));
      const Batch profile = source->Draw(c.profiling.samples, DrawSeed(rng), 0);
      const auto tokens = MeanMicrobatchTokens(ctx.model, profile.samples, mu);
      ConfigProblem p;
      p.microbatches = K;
      p.group_gpus = g;
      p.gpu_mem_bytes = ctx.cluster.usable_mem_bytes();
      for (const auto& mods : comps) {
        p.options.emplace_back();
        for (int tp : Divisors(g)) {
          if (ctx.fixed_tp > 0 && tp != ctx.fixed_tp) continue;
          p.options.back().push_back(
              PriceComponent(ctx.model, ctx.cluster, ctx.workload, mods, tokens, tp, g / tp, dp));
        }
      }
      // Resharding between the components: the encoder's last module's output
      // of one microbatch, forward and its gradient back, over the replica's link.
      {
        const int last = ctx.model.FindModule(units.encoder.back());
        const Layer& ll = ctx.model.modules[last].layers.back();
        const double bytes = 2 * ElementBytes(ctx.workload.precision) * tokens[last].tokens * OutWidth(ll);
        const Link link = ctx.cluster.LinkForSpan(per_replica);
        p.reshard_s.push_back(bytes / link.bytes_per_s + link.latency_s);
      }
      // Algorithm 3 lines 3-15 over the proportional split M and its two
      // neighbours (one group more or less for the encoder): the thesis'
      // converged splits (Tables 4.2, C.2-C.8) and its chosen configurations
      // (Tables 4.1, C.1) differ by one such step, so its throughput-based
      // search must override pure rounding; Eq. 4.2 and the simulator decide.
      for (int step : {0, -1, 1}) {
        std::vector<int> gpus = c.profiling.gpus;
        gpus[0] += step * g;
        gpus[1] -= step * g;
        if (gpus[0] < g || gpus[1] < g) continue;
        p.gpus = gpus;
        for (EntrainConfig& cfg : SearchConfigs(p)) {
          Candidate x = c;
          x.gpus = gpus;
          x.config = std::move(cfg);
          candidates.push_back(std::move(x));
        }
      }
    }
  }
  std::stable_sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return a.cluster_throughput() > b.cluster_throughput();
  });
  {  // round-robin over (DP, group): each choice's n-th best in round n, rounds by Eq. 4.2
    std::map<std::pair<int, int>, int> seen;
    std::vector<std::pair<int, size_t>> key;  // (round, position by Eq. 4.2)
    for (size_t i = 0; i < candidates.size(); ++i) key.push_back({seen[{candidates[i].dp, candidates[i].group}]++, i});
    std::vector<size_t> order(candidates.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key[a] < key[b]; });
    std::vector<Candidate> sorted;
    for (size_t i : order) sorted.push_back(std::move(candidates[i]));
    candidates = std::move(sorted);
  }
  CandidateSearch search(ctx, "entrain");
  EntrainScheduler scheduler;
  search.SetBatchSchedule([&](const Plan& plan) { return scheduler.Schedule(ctx, plan, ctx.representative, 0); });
  int simulated = 0;
  std::string profiled;
  for (const Candidate& c : candidates) {
    if (search.feasible() >= kConfirmed || simulated >= kSimulated) break;
    ++simulated;
    const int K = static_cast<int>(B / (c.dp * mu));
    search.Try([&](Recompute r) {
      Plan plan = EmptyPlan(ctx, "entrain", c.group);
      int first = 0;
      for (size_t i = 0; i < comps.size(); ++i) {
        plan.units.push_back(MakeEntrainUnit(ctx, Names()[i], comps[i], first, c.config.components[i], c.dp, K, r));
        first += c.dp * c.config.components[i].pp;
      }
      plan.brokers.push_back({"encoder", "llm", c.dp});
      return plan;
    });
    if (profiled.empty()) {
      std::string alloc;
      for (int x : c.profiling.gpus) alloc += fmt::format("{}{}", alloc.empty() ? "" : ":", x);
      profiled = fmt::format("b_min {} ({} trials, sizes", c.profiling.samples, c.profiling.trials);
      for (int64_t n : c.profiling.tried) profiled += fmt::format(" {}", n);
      // Table 4.2's view: what the k + 1 draws at each size allocated.
      profiled += "; allocations over the trials:";
      for (size_t t = 0; t < c.profiling.tried.size(); ++t) {
        const auto& seen = c.profiling.seen[t];
        profiled += fmt::format(" {} {}{{", c.profiling.tried[t], seen.size() == 1 ? "stable" : "unstable");
        for (size_t i = 0; i < seen.size(); ++i) {
          profiled += fmt::format("{}{}:{}", i ? " " : "", seen[i][0], seen[i][1]);
        }
        profiled += "}";
      }
      profiled += fmt::format("; proportional encoder:llm GPUs per replica {})", alloc);
      if (c.profiling.samples > B) {
        profiled += fmt::format("; WARNING: global batch {} < b_min, balance not guaranteed (§4.2)", B);
      }
    }
  }
  if (candidates.empty()) {
    search.Skip(skipped.empty() ? fmt::format("no DP divides the global batch {} in microbatches of {} with at least "
                                              "two GPU groups per replica",
                                              B, mu)
                                : skipped);
  }
  return search.Finish(
      fmt::format(
          "entrain: Algorithm 2 ({}), then Algorithm 3 over DP x group x per-component "
          "TP x CP x PP on that split and one group either side (Eq. 4.1-4.2 ranking {} configurations); up to {} "
          "simulated with the deferral schedule, round-robin over DP x group, until {} fit",
          profiled.empty() ? "no stable batch" : profiled, candidates.size(), kSimulated, kConfirmed),
      DescribeEntrainPlan);
}

}  // namespace loom
