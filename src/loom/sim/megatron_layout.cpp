#include "loom/sim/megatron_layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "loom/cost/collectives.h"
#include "loom/cost/device_time.h"
#include "loom/cost/frozen.h"
#include "loom/cost/memory.h"
#include "loom/error.h"
#include "loom/pipeline/schedules.h"
#include "loom/cost/layer_pricing.h"

namespace loom {

namespace {

constexpr double kElemBytes = kActivationElemBytes;

}  // namespace

void ParallelConfig::Validate(const Model& model, const Cluster& cluster, const Workload& workload) const {
  for (auto [name, v] : {std::pair{"tp", tp}, {"pp", pp}, {"dp", dp}, {"cp", cp}, {"vpp", vpp},
                         {"microbatches", microbatches}}) {
    if (v < 1) throw Error(fmt::format("--{}: must be >= 1, got {}", name, v));
  }
  if (tp * pp * dp * cp != cluster.num_gpus()) {
    throw Error(fmt::format("tp ({}) x pp ({}) x dp ({}) x cp ({}) = {} != the {} GPUs of cluster {}", tp, pp, dp, cp,
                            tp * pp * dp * cp, cluster.num_gpus(), cluster.name));
  }
  if (tp > cluster.gpus_per_node || cluster.gpus_per_node % tp != 0) {
    throw Error(fmt::format("tp ({}) must divide the {} GPUs of a node: tensor parallelism stays inside a node", tp,
                            cluster.gpus_per_node));
  }
  if (workload.global_batch % (static_cast<int64_t>(dp) * microbatches) != 0) {
    throw Error(fmt::format("global batch ({}) must split into dp ({}) x microbatches ({}) equal microbatches",
                            workload.global_batch, dp, microbatches));
  }
  if (model.num_layers() < pp * vpp) {
    throw Error(fmt::format("pp ({}) x vpp ({}) = {} stages but {} has only {} layers", pp, vpp, pp * vpp, model.name,
                            model.num_layers()));
  }
  if (vpp > 1 && schedule != "interleaved") {
    throw Error(fmt::format("--vpp {} needs --schedule interleaved", vpp));
  }
  sim.Validate();
}

MegatronSimulation BuildMegatronSimulation(const Model& model, const Cluster& c, const Workload& w,
                                           const ParallelConfig& cfg, const Batch& batch) {
  cfg.Validate(model, c, w);
  MegatronSimulation out;
  out.num_gpus = c.num_gpus();
  const int stages = cfg.pp * cfg.vpp;
  const int m = cfg.microbatches;
  const int64_t mbs = w.global_batch / (static_cast<int64_t>(cfg.dp) * m);
  if (static_cast<int64_t>(batch.samples.size()) != w.global_batch) {
    throw Error(fmt::format("batch has {} samples, the workload's global batch is {}", batch.samples.size(),
                            w.global_batch));
  }
  const auto needs = ComputeBackwardNeeds(model);
  for (size_t i = 0; i < model.modules.size(); ++i) {
    for (size_t j = 0; j < model.modules[i].layers.size(); ++j) {
      out.layers.push_back({static_cast<int>(i), static_cast<int>(j)});
    }
  }
  const int n = static_cast<int>(out.layers.size());

  // Price every layer for every microbatch of every replica.
  std::vector<std::vector<std::vector<LayerTimes>>> times(cfg.dp);  // [replica][mb][layer]
  std::vector<std::vector<std::vector<TokenStats>>> tokens(cfg.dp);  // [replica][mb][module]
  std::vector<double> mean_cost(n, 0.0);
  for (int d = 0; d < cfg.dp; ++d) {
    times[d].resize(m);
    tokens[d].resize(m);
    for (int k = 0; k < m; ++k) {
      auto first = batch.samples.begin() + (static_cast<int64_t>(d) * m + k) * mbs;
      std::vector<Sample> mb(first, first + mbs);
      tokens[d][k] = CountModuleTokens(model, mb);
      times[d][k].resize(n);
      for (int i = 0; i < n; ++i) {
        auto [mi, li] = out.layers[i];
        const bool split = SplitsOverTensorParallel(model.modules[mi], cfg.tp);
        LayerParallelism par{cfg.tp, cfg.cp, split, cfg.recompute};
        LayerTimes lt = PriceLayer(model.modules[mi].layers[li], tokens[d][k][mi], needs[mi][li], c, par);
        times[d][k][i] = lt;
        mean_cost[i] += lt.forward_s + lt.backward_data_s + lt.backward_weight_s;
        out.model_flops += lt.flops * cfg.tp * cfg.cp;  // a replicated module's tp ranks each do 1/tp
      }
    }
  }
  out.partition = MinMaxPartition(mean_cost, stages);

  out.schedule = MakeSchedule(cfg.schedule, cfg.pp, m, cfg.vpp);
  const Link p2p = c.LinkForSpan(cfg.tp * cfg.cp * cfg.dp + 1);
  // Parameters per rank: TP-split modules hold 1/tp, replicated ones all of it.
  std::vector<double> trainable(stages, 0.0), frozen(stages, 0.0), replicated(stages, 0.0);
  for (int v = 0; v < stages; ++v) {
    for (int i = out.partition.begin[v]; i < out.partition.begin[v + 1]; ++i) {
      auto [mi, li] = out.layers[i];
      const Layer& l = model.modules[mi].layers[li];
      const bool split = SplitsOverTensorParallel(model.modules[mi], cfg.tp);
      const double params = static_cast<double>(LayerParams(l)) / (split ? cfg.tp : 1);
      (l.frozen ? frozen : trainable)[v] += params;
      if (!split && !l.frozen) replicated[v] += params;
    }
  }
  // Identical replicas (same microbatch costs) are simulated once.
  std::map<std::vector<double>, int> seen;
  for (int d = 0; d < cfg.dp; ++d) {
    PipelineCosts pc;
    pc.p2p = p2p;
    pc.stage.assign(stages, std::vector<StageCost>(m));
    pc.static_bytes.assign(cfg.pp, 0.0);
    pc.grad_sync_s.assign(stages, 0.0);
    std::vector<double> signature;
    for (int v = 0; v < stages; ++v) {
      const int rank = out.schedule.stage_rank[v];
      ModelStateBytes state = ModelState(trainable[v], frozen[v], cfg.dp * cfg.cp, w.zero_stage);
      pc.static_bytes[rank] += state.total();
      // Gradients of the stage's trainable weights, reduced in bf16 over DP x CP
      // (and over the TP group too for replicated modules).
      pc.grad_sync_s[v] = GroupAllReduceTime_s(2 * (trainable[v] - replicated[v]), cfg.dp * cfg.cp, cfg.tp, c) +
                          GroupAllReduceTime_s(2 * replicated[v], cfg.dp * cfg.cp * cfg.tp, 1, c);
      const int last = out.partition.begin[v + 1] - 1;
      auto [lm, ll] = out.layers[last];
      for (int k = 0; k < m; ++k) {
        StageCost& sc = pc.stage[v][k];
        for (int i = out.partition.begin[v]; i <= last; ++i) {
          const LayerTimes& lt = times[d][k][i];
          sc.forward_s += lt.forward_s;
          sc.backward_data_s += lt.backward_data_s;
          sc.backward_weight_s += lt.backward_weight_s;
          sc.activation_bytes += lt.activation_bytes;
          sc.transient_bytes = std::max(sc.transient_bytes, lt.transient_bytes);
        }
        sc.send_bytes = kElemBytes * tokens[d][k][lm].tokens / cfg.cp * OutWidth(model.modules[lm].layers[ll]);
        signature.insert(signature.end(), {sc.forward_s, sc.backward_data_s, sc.backward_weight_s,
                                           sc.activation_bytes, sc.send_bytes});
      }
    }
    auto [it, inserted] = seen.emplace(signature, static_cast<int>(out.replicas.size()));
    if (inserted) {
      out.replicas.push_back(std::move(pc));
      out.replica_weight.push_back(1);
    } else {
      ++out.replica_weight[it->second];
    }
  }
  return out;
}

std::vector<std::string> StageLabels(const Model& model, const MegatronSimulation& sim) {
  std::vector<std::string> labels;
  for (int v = 0; v < sim.partition.num_stages(); ++v) {
    std::string label;
    int i = sim.partition.begin[v];
    while (i < sim.partition.begin[v + 1]) {
      int mi = sim.layers[i].first, j = i;
      while (j < sim.partition.begin[v + 1] && sim.layers[j].first == mi) ++j;
      label += fmt::format("{}{}[{}:{}]", label.empty() ? "" : "+", model.modules[mi].name, sim.layers[i].second,
                           sim.layers[j - 1].second + 1);
      i = j;
    }
    labels.push_back(label);
  }
  return labels;
}

}  // namespace loom
