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

std::vector<ModuleSurface> SampleSurfaces(const StrategyContext& ctx, const SurfaceOptions& options) {
  if (!(options.granularity > 0 && options.granularity <= 1)) {
    throw Error("mosaic: SM-quota granularity must be in (0, 1], e.g. 0.1 for 10%");
  }
  const Model& model = ctx.model;
  const Cluster& cluster = ctx.cluster;
  const SmPartitionRules rules = PartitionRules(cluster);
  const SmSharing sharing = cluster.cost_model ? cluster.cost_model->sm_sharing() : SmSharing{};
  const auto tokens = CountModuleTokens(model, ctx.representative.samples);
  const auto needs = ComputeBackwardNeeds(model);
  const int tp = options.tp;
  if (tp < 1 || cluster.gpus_per_node % tp != 0) {
    throw Error(fmt::format("mosaic: a slot of {} GPUs does not divide a node of {}", tp, cluster.gpus_per_node));
  }
  const int n = cluster.num_gpus() / tp;
  const int64_t batch = std::max<int64_t>(1, static_cast<int64_t>(ctx.representative.samples.size()));
  // Distinct SM quotas of the grid.
  std::set<int> quotas;
  const int steps = static_cast<int>(std::lround(1.0 / options.granularity));
  if (!options.whole_gpus) {
    for (int k = 1; k <= steps; ++k) quotas.insert(QuotaSms(std::min(1.0, k * options.granularity), rules));
  }
  quotas.insert(rules.sm_count);
  const Precision precision = ctx.workload.precision;
  std::vector<ModuleSurface> out;
  for (size_t mi = 0; mi < model.modules.size(); ++mi) {
    const Module& mod = model.modules[mi];
    ModuleSurface s;
    s.module = mod.name;
    s.index = static_cast<int>(mi);
    // Per GPU, as the simulator prices a unit of this TP (sim/price_execution.cpp):
    // TP-split weights, or the whole module with its sequences shared.
    const bool split = SplitsOverTensorParallel(mod, tp);
    const int seq_share = split ? 1 : tp;
    double trainable = 0, frozen = 0;
    for (const auto& l : mod.layers) {
      (mod.frozen || l.frozen ? frozen : trainable) += static_cast<double>(LayerParams(l)) / (split ? tp : 1);
    }
    const double elem = ElementBytes(precision);
    const int m = options.microbatches;
    for (int d = 1; d <= n && d * m <= batch; d *= 2) {
      const ModelStateBytes state = ModelState(trainable, frozen, d * seq_share, 1, precision);
      // Gradients all-reduced in the training precision, as the simulator prices DP sync.
      const double sync_s = trainable > 0 && d * seq_share > 1
                                ? GroupAllReduceTime_s(elem * trainable, d * seq_share, split ? tp : 1, cluster)
                                : 0;
      // One replica's share: B / d samples (the representative batch's
      // sequences split evenly, whole sequences each) in m microbatches.
      const TokenStats share = ShareOfSequences(tokens[mi], d * seq_share * m);
      double bytes = 0, act_bytes = 0;
      std::vector<std::array<double, 3>> layer_phases;
      for (size_t li = 0; li < mod.layers.size(); ++li) {
        LayerParallelism par;
        par.tp = tp;
        par.split = split;
        par.sequence_parallel = true;  // the plan's units keep Megatron's default
        par.precision = precision;
        par.recompute = options.recompute;
        const LayerTimes t = PriceLayer(mod.layers[li], share, needs[mi][li], cluster, par);
        layer_phases.push_back({t.forward_s, t.backward_data_s, t.backward_weight_s});
        const LayerWork w = EstimateLayerWork(mod.layers[li], share, 1, ElementBytes(precision));
        bytes += w.Bytes(Phase::kForward) + w.Bytes(Phase::kBackwardData) + w.Bytes(Phase::kBackwardWeight);
        act_bytes += t.activation_bytes;
      }
      for (int sms : quotas) {
        const double fraction = static_cast<double>(sms) / rules.sm_count;
        double compute_s = 0, floor_total = 0;
        for (const auto& ph : layer_phases) {
          for (double t : ph) {
            compute_s += sharing.PhaseTime_s(t, fraction);
            if (t > 0) floor_total += sharing.PhaseFloor_s();
          }
        }
        SurfacePoint p;
        p.dp = d;
        p.sms = sms;
        p.latency_s = m * compute_s + sync_s;
        p.launch_floor_s = m * floor_total;
        p.mem_bytes = state.total() + act_bytes;
        p.bandwidth = std::min(1.0, bytes / std::max(1e-12, compute_s) / cluster.gpu.hbm_bytes_per_s);
        s.points.push_back(p);
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace loom::mosaic
