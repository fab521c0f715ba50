#include "loom/strategies/mosaic/scaling_surface.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <set>

#include "loom/cost/collectives.h"
#include "loom/cost/cost_model.h"
#include "loom/cost/frozen.h"
#include "loom/cost/layer_pricing.h"
#include "loom/cost/layer_work.h"
#include "loom/cost/memory.h"
#include "loom/cost/token_stats.h"
#include "loom/error.h"
#include "loom/pipeline/partition.h"

namespace loom::mosaic {

SmPartitionRules PartitionRules(const Cluster& cluster) {
  SmPartitionRules r;
  r.sm_count = cluster.gpu.sm_count > 0 ? cluster.gpu.sm_count : 132;
  // What `loom probe-sm` read on the H100: the driver's split of 132 SMs into
  // 8-SM groups yields 15 of them (docs/results/mosaic.md); other GPUs are
  // assumed to split all of their whole groups.
  r.partitionable_sms = r.sm_count == 132 ? 120 : r.sm_count / r.alignment_sms * r.alignment_sms;
  return r;
}

namespace {

// What one module costs on a block of slots, per quota (in `quotas` order):
// `replicas` data-parallel copies, each a pipeline of `pp` stages of `tp`
// GPUs (pp = 1: the module whole on each group), m microbatches.
struct ModulePricing {
  const StrategyContext& ctx;
  const SmPartitionRules& rules;
  const SmSharing& sharing;
  const std::vector<int>& quotas;
  int tp = 1;
  int microbatches = 1;
  int rounds = 1;
  Recompute recompute = Recompute::kNone;

  std::vector<SurfacePoint> Price(size_t mi, const TokenStats& tokens, const std::vector<BackwardNeeds>& needs,
                                  int replicas, int pp) const {
    const Module& mod = ctx.model.modules[mi];
    const Cluster& cluster = ctx.cluster;
    const Precision precision = ctx.workload.precision;
    const int m = microbatches;
    const int per_round = m / rounds;
    // Per GPU, as the simulator prices a unit of this TP (sim/price_execution.cpp):
    // TP-split weights, or the whole module with its sequences shared.
    const bool split = SplitsOverTensorParallel(mod, tp);
    const int seq_share = split ? 1 : tp;
    const double elem = ElementBytes(precision);
    // One replica's share: B / replicas samples (the representative batch's
    // sequences split evenly, whole sequences each) in m microbatches.
    const TokenStats share = ShareOfSequences(tokens, replicas * seq_share * m);
    const size_t L = mod.layers.size();
    std::vector<std::array<double, 3>> phases(L);
    std::vector<double> layer_s(L), act(L), trainable(L), frozen(L);
    std::vector<LayerTimes> priced(L);
    double bytes = 0;
    for (size_t li = 0; li < L; ++li) {
      LayerParallelism par;
      par.tp = tp;
      par.split = split;
      par.sequence_parallel = true;  // the plan's units keep Megatron's default
      par.precision = precision;
      par.recompute = recompute;
      const LayerTimes t = PriceLayer(mod.layers[li], share, needs[li], cluster, par);
      phases[li] = {t.forward_s, t.backward_data_s, t.backward_weight_s};
      layer_s[li] = t.forward_s + t.backward_data_s + t.backward_weight_s;
      act[li] = t.activation_bytes;
      priced[li] = t;
      const double params =
          split ? LayerParamsOnTpRank(mod.layers[li], tp) : static_cast<double>(LayerParams(mod.layers[li]));
      (mod.frozen || mod.layers[li].frozen ? frozen : trainable)[li] = params;
      const LayerWork w = EstimateLayerWork(mod.layers[li], share, 1, elem);
      bytes += w.Bytes(Phase::kForward) + w.Bytes(Phase::kBackwardData) + w.Bytes(Phase::kBackwardWeight);
    }
    // Stages balanced by time, as the plan's units are (Balance::kTime).
    const Partition part = MinMaxPartition(layer_s, pp);
    // Per GPU, the worst stage: its state, its gradient sync, and its
    // activations alive at once: 1F1B's stage s holds min(pp - s, m / k)
    // microbatches, GPipe (a Mosaic stage before the last) all m / k of a round.
    // At its peak, in a backward, one layer's working set (and recomputed
    // activations) come on top, less what the layers above it have freed, as
    // the simulator adds it (BackwardTransientBytes).
    // A stage held while a later one runs is in no backward: without it.
    double mem = 0, held = 0, sync_s = 0;
    for (int st = 0; st < pp; ++st) {
      double tr = 0, fr = 0, a = 0, working = 0;
      for (int li = part.begin[st]; li < part.begin[st + 1]; ++li) {
        tr += trainable[li];
        fr += frozen[li];
        a += act[li];
      }
      working = BackwardTransientBytes(
          std::vector<LayerTimes>(priced.begin() + part.begin[st], priced.begin() + part.begin[st + 1]));
      const double state = ModelState(tr, fr, replicas * seq_share, 1, precision).total();
      mem = std::max(mem, state + std::min(pp - st, per_round) * a + working);
      held = std::max(held, state + per_round * a);
      // Gradients all-reduced in the training precision, as the simulator prices DP sync.
      if (tr > 0 && replicas * seq_share > 1) {
        sync_s = std::max(sync_s, GroupAllReduceTime_s(elem * tr, replicas * seq_share, split ? tp : 1, cluster));
      }
    }
    std::vector<SurfacePoint> out;
    for (int sms : quotas) {
      const double fraction = static_cast<double>(sms) / rules.sm_count;
      // The slowest stage per microbatch at this quota; a pipeline of m / k
      // microbatches over pp stages takes m / k + pp - 1 of them (1F1B and
      // GPipe alike), k rounds.
      double stage_s = 0, stage_floor_s = 0, compute_s = 0;
      for (int st = 0; st < pp; ++st) {
        double t_s = 0, f_s = 0;
        for (int li = part.begin[st]; li < part.begin[st + 1]; ++li) {
          for (double t : phases[li]) {
            t_s += sharing.PhaseTime_s(t, fraction);
            if (t > 0) f_s += sharing.PhaseFloor_s();
          }
        }
        stage_s = std::max(stage_s, t_s);
        stage_floor_s = std::max(stage_floor_s, f_s);
        compute_s += t_s;
      }
      SurfacePoint p;
      p.sms = sms;
      p.pp = pp;
      p.latency_s = rounds * (per_round + pp - 1) * stage_s + sync_s;
      p.launch_floor_s = m * stage_floor_s;
      p.mem_bytes = mem;
      p.held_mem_bytes = held;
      p.bandwidth = std::min(1.0, bytes / std::max(1e-12, compute_s) / cluster.gpu.hbm_bytes_per_s);
      out.push_back(p);
    }
    return out;
  }
};

}  // namespace

const SurfacePoint& ModuleSurface::At(int dp, int pp, int sms) const {
  for (const auto& p : points) {
    if (p.dp == dp && p.pp == pp && p.sms == sms) return p;
  }
  throw Error(fmt::format("mosaic: internal: module {} has no option d{} pp{} with {} SMs", module, dp, pp, sms));
}

std::vector<ModuleSurface> SampleSurfaces(const StrategyContext& ctx, const SurfaceOptions& options,
                                          const std::vector<TokenStats>& tokens) {
  if (!(options.granularity > 0 && options.granularity <= 1)) {
    throw Error("mosaic: SM-quota granularity must be in (0, 1], e.g. 0.1 for 10%");
  }
  const Model& model = ctx.model;
  const Cluster& cluster = ctx.cluster;
  const SmPartitionRules rules = PartitionRules(cluster);
  const SmSharing sharing = cluster.cost_model ? cluster.cost_model->sm_sharing() : SmSharing{};
  const auto needs = ComputeBackwardNeeds(model);
  const int tp = options.tp, pp = options.pp;
  if (tp < 1 || cluster.gpus_per_node % tp != 0) {
    throw Error(fmt::format("mosaic: a slot of {} GPUs does not divide a node of {}", tp, cluster.gpus_per_node));
  }
  if (pp < 1 || tp * pp > cluster.num_gpus() || (pp > 1 && tp != cluster.gpus_per_node)) {
    throw Error(fmt::format("mosaic: slots of {} x {} GPUs: pipelined slots are whole nodes, at most the {} GPUs of {}",
                            pp, tp, cluster.num_gpus(), cluster.name));
  }
  const int n = cluster.num_gpus() / (tp * pp);  // whole slots; GPUs past them stay idle
  const int64_t batch = std::max<int64_t>(1, static_cast<int64_t>(ctx.representative.samples.size()));
  // Distinct SM quotas of the grid.
  std::set<int> quota_set;
  const int steps = static_cast<int>(std::lround(1.0 / options.granularity));
  if (!options.whole_gpus) {
    for (int k = 1; k <= steps; ++k) quota_set.insert(QuotaSms(std::min(1.0, k * options.granularity), rules));
  }
  quota_set.insert(rules.sm_count);
  const std::vector<int> quotas(quota_set.begin(), quota_set.end());
  const int m = options.microbatches;
  if (options.rounds < 1 || m % options.rounds != 0) {
    throw Error(fmt::format("mosaic: {} rounds do not divide {} microbatches", options.rounds, m));
  }
  const ModulePricing pricing{ctx, rules, sharing, quotas, tp, m, options.rounds, options.recompute};
  std::vector<ModuleSurface> out;
  for (size_t mi = 0; mi < model.modules.size(); ++mi) {
    const Module& mod = model.modules[mi];
    ModuleSurface s;
    s.module = mod.name;
    s.index = static_cast<int>(mi);
    for (int d = 1; d <= n; d *= 2) {
      // On a block of d slots a module is whole on every group (d x pp
      // replicas; fewer, on the first groups, when a microbatch has fewer
      // samples) or, with slots of several groups, pipelined over each
      // slot's pp groups (d replicas): two options the solver chooses from.
      int flat = d * pp;
      while (flat > 1 && flat * m > batch) flat /= 2;
      if (flat * m <= batch && (flat == d * pp || (pp > 1 && d == 1))) {
        for (SurfacePoint p : pricing.Price(mi, tokens[mi], needs[mi], flat, 1)) {
          p.dp = d;
          p.replicas = flat;
          s.points.push_back(p);
        }
      }
      if (pp > 1 && static_cast<int>(mod.layers.size()) >= pp && m / options.rounds >= pp && d * m <= batch) {
        for (SurfacePoint p : pricing.Price(mi, tokens[mi], needs[mi], d, pp)) {
          p.dp = d;
          p.replicas = d;
          s.points.push_back(p);
        }
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace loom::mosaic
