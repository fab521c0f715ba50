#include "loom/strategies/pipeweaver/partitioner.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "loom/cost/cost_model.h"
#include "loom/cost/frozen.h"
#include "loom/cost/layer_pricing.h"
#include "loom/cost/token_stats.h"
#include "loom/error.h"
#include "loom/plan/compile_plan.h"
#include "loom/strategies/plan_builders.h"

namespace loom {

std::vector<ModalityModule> ModalityModules(const Model& model, int pp) {
  std::vector<ModalityModule> out;
  for (const auto& m : model.modules) {
    if (out.empty() || m.role != ModuleRole::kProjector) out.push_back({m.name, {}, 0});
    out.back().modules.push_back(m.name);
    out.back().layers += static_cast<int>(m.layers.size());
  }
  // Too few layers to give every rank a chunk: join a neighbour.
  for (size_t i = 0; i < out.size() && out.size() > 1;) {
    if (out[i].layers >= pp) {
      ++i;
      continue;
    }
    const size_t into = i + 1 < out.size() ? i + 1 : i - 1;
    ModalityModule& dst = out[into];
    if (into > i) {
      dst.modules.insert(dst.modules.begin(), out[i].modules.begin(), out[i].modules.end());
      dst.name = out[i].name;
    } else {
      dst.modules.insert(dst.modules.end(), out[i].modules.begin(), out[i].modules.end());
    }
    dst.layers += out[i].layers;
    out.erase(out.begin() + static_cast<long>(i));
    i = 0;
  }
  return out;
}

std::vector<int> SubMicrobatchSizes() { return {1, 2, 4, 8, 16, 32, 64}; }

namespace {

// Useful FLOPs per second of `module` running b sequences at `tp`: every
// statistic of its modules' tokens scaled from the representative batch's
// average sequence. Each phase of each layer is priced as the simulator prices
// it (sim/price_execution.cpp, PriceStage): never under the profile's per-phase
// launch floor. Without the floor a one-image ViT-5B layer at TP 4 looked 95%
// efficient under the H100 profile while the simulator ran it at the floor, so
// B = 1 was chosen and the woven schedule lost to the static one (issue 44).
double Throughput(const StrategyContext& ctx, const ModalityModule& module, int tp, int b, double sequences,
                  const std::vector<TokenStats>& tokens, const std::vector<std::vector<BackwardNeeds>>& needs) {
  const SmSharing sharing = ctx.cluster.cost_model ? ctx.cluster.cost_model->sm_sharing() : SmSharing{};
  double flops = 0, time_s = 0;
  const double scale = b / sequences;
  for (const auto& name : module.modules) {
    const int mi = ctx.model.FindModule(name);
    TokenStats t = tokens[mi];
    t *= scale;
    LayerParallelism par;
    par.tp = tp;
    // A module whose heads do not divide by tp is replicated over the TP group:
    // PriceLayer gives each rank its 1/tp of the sequences (not divided here
    // again: that divided twice and measured B_i at 1/tp of its size).
    par.split = SplitsOverTensorParallel(ctx.model.modules[mi], tp);
    for (size_t li = 0; li < ctx.model.modules[mi].layers.size(); ++li) {
      const LayerTimes lt = PriceLayer(ctx.model.modules[mi].layers[li], t, needs[mi][li], ctx.cluster, par);
      flops += lt.flops;
      time_s += sharing.PhaseTime_s(lt.forward_s, 1) + sharing.PhaseTime_s(lt.backward_data_s, 1) +
                sharing.PhaseTime_s(lt.backward_weight_s, 1);
    }
  }
  return time_s > 0 ? flops / time_s : 0;
}

}  // namespace

double ModuleThroughput(const StrategyContext& ctx, const ModalityModule& module, int tp, int b) {
  const auto tokens = CountModuleTokens(ctx.model, ctx.representative.samples);
  const double sequences = tokens[ctx.model.FindModule(module.modules.front())].sequences;
  return sequences > 0 ? Throughput(ctx, module, tp, b, sequences, tokens, ComputeBackwardNeeds(ctx.model)) : 0;
}

int SubMicrobatchSize(const StrategyContext& ctx, const ModalityModule& module, int tp, double fraction) {
  const auto tokens = CountModuleTokens(ctx.model, ctx.representative.samples);
  const auto needs = ComputeBackwardNeeds(ctx.model);
  const double sequences = tokens[ctx.model.FindModule(module.modules.front())].sequences;
  if (sequences <= 0) return 1;
  std::vector<double> thr;
  for (int b : SubMicrobatchSizes()) thr.push_back(Throughput(ctx, module, tp, b, sequences, tokens, needs));
  const double best = *std::max_element(thr.begin(), thr.end());
  for (size_t i = 0; i < thr.size(); ++i) {
    if (thr[i] >= fraction * best) return SubMicrobatchSizes()[i];
  }
  return SubMicrobatchSizes().back();
}

std::vector<int> SegmentCounts(const std::vector<double>& times_s, const std::vector<int>& layers, int pp,
                               int max_segments) {
  double fastest = 0;
  for (double t : times_s) {
    if (t > 0 && (fastest == 0 || t < fastest)) fastest = t;
  }
  std::vector<int> k(times_s.size(), 1);
  for (size_t i = 0; i < times_s.size(); ++i) {
    if (fastest > 0) k[i] = static_cast<int>(std::floor(times_s[i] / fastest));
    k[i] = std::clamp(k[i], 1, std::max(1, std::min(max_segments, layers[i] / pp)));
  }
  return k;
}

std::vector<ModalityModule> StaticPartition(const StrategyContext& ctx, int tp, int pp) {
  std::vector<ModalityModule> modules = ModalityModules(ctx.model, pp);
  std::vector<double> times;
  std::vector<int> layers;
  for (auto& m : modules) {
    const bool encoder = ctx.model.modules[ctx.model.FindModule(m.modules.front())].role == ModuleRole::kEncoder;
    m.sub_microbatch_size = encoder && ctx.fixed_encoder_sub_microbatch > 0 ? ctx.fixed_encoder_sub_microbatch
                                                                            : SubMicrobatchSize(ctx, m, tp);
    const auto w = LayerWeights(ctx, UnitLayers(ctx.model, m.modules), Balance::kTime, tp);
    m.time_s = 0;
    for (double x : w) m.time_s += x;
    times.push_back(m.time_s);
    layers.push_back(m.layers);
  }
  const auto k = SegmentCounts(times, layers, pp);
  for (size_t i = 0; i < modules.size(); ++i) modules[i].segments = k[i];
  return modules;
}

Plan WovenPlan(const StrategyContext& ctx, const std::vector<ModalityModule>& modules, int tp, int pp, int dp,
               int microbatches, Recompute recompute) {
  Plan plan = EmptyPlan(ctx, "pipeweaver", tp);
  Unit u;
  u.name = "all";
  u.tp = tp;
  u.recompute = recompute;
  u.zero_stage = 1;  // as Megatron-LM runs it (distributed optimizer)
  PipelineSpec ps;
  ps.replicas = dp;
  ps.pp = pp;
  ps.microbatches = microbatches;
  int vpp = 0;
  for (const auto& m : modules) {
    u.modules.insert(u.modules.end(), m.modules.begin(), m.modules.end());
    const auto layers = UnitLayers(ctx.model, m.modules);
    const Partition cut = MinMaxPartition(LayerWeights(ctx, layers, Balance::kTime, tp), pp * m.segments);
    for (auto& st : StagesFromPartition(ctx.model, layers, cut, pp)) ps.stages.push_back(std::move(st));
    vpp += m.segments;
  }
  ps.schedule = vpp == 1 ? ScheduleKind::kOneFOneB : ScheduleKind::kInterleaved;
  u.pipelines.push_back(std::move(ps));
  plan.units.push_back(std::move(u));
  return plan;
}

std::map<std::string, std::vector<int>> SubMicrobatchCounts(const Model& model, const Plan& plan,
                                                            const std::vector<ModalityModule>& modules,
                                                            const Batch& batch,
                                                            const std::vector<std::vector<int>>& microbatch_samples) {
  const int D = plan.units[0].pipelines[0].replicas;
  std::map<std::string, std::vector<int>> out;
  for (const auto& mod : modules) {
    const int lead = model.FindModule(mod.modules.front());
    std::vector<int> counts;
    for (const auto& mb : microbatch_samples) {
      int most = 1 << 30;
      double sequences = 0;
      const bool by_item = std::all_of(mod.modules.begin(), mod.modules.end(), [&](const std::string& n) {
        return ItemDrivenModule(model, model.FindModule(n));
      });
      for (const auto& slice : SplitEven(mb, D)) {
        double n = 0;
        for (int s : slice) n += CountModuleTokens(model, batch.samples[s])[lead].sequences;
        sequences = std::max(sequences, n);
        most = std::min<int>(most, by_item ? static_cast<int>(n) : static_cast<int>(slice.size()));
      }
      const int m = static_cast<int>(std::ceil(sequences / mod.sub_microbatch_size - 1e-9));
      counts.push_back(std::clamp(m, 1, std::max(1, most)));
    }
    if (std::any_of(counts.begin(), counts.end(), [](int c) { return c > 1; })) {
      for (const auto& name : mod.modules) out[name] = counts;
    }
  }
  return out;
}

}  // namespace loom
