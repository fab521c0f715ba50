#include "loom/sim/plan_helpers.h"

#include <fmt/format.h>

#include "loom/cost/collectives.h"
#include "loom/cost/layer_work.h"
#include "loom/sim/layer_pricing.h"

namespace loom {

std::vector<std::vector<int>> SplitEven(const std::vector<int>& items, int parts) {
  std::vector<std::vector<int>> out(parts);
  const int64_t n = static_cast<int64_t>(items.size());
  for (int d = 0; d < parts; ++d) {
    out[d].assign(items.begin() + d * n / parts, items.begin() + (d + 1) * n / parts);
  }
  return out;
}

StageParams StageParamsOf(const Model& model, const Unit& unit, const StageSpec& stage) {
  StageParams p;
  for (const auto& r : stage.layers) {
    const Module& m = model.modules[model.FindModule(r.module)];
    const bool split = SplitsOverTensorParallel(m, unit.tp);
    for (int li = r.begin; li < r.end; ++li) {
      const Layer& l = m.layers[li];
      const double params = static_cast<double>(LayerParams(l)) / (split ? unit.tp : 1);
      (l.frozen ? p.frozen : p.trainable) += params;
      if (!split && !l.frozen) p.replicated += params;
    }
  }
  return p;
}

// TP-split weights sync over the D replicas x the group members sharing
// sequences x CP (TP ranks stride apart), replicated weights over every GPU of
// the replicas. ZeRO-3 reduce-scatters inside each layer instead (layer_pricing.h).
double GradSyncTime_s(const StageParams& params, int D, const Unit& unit, int group_gpus, const Cluster& c) {
  if (unit.zero_stage == 3) return 0;
  const int share = group_gpus / (unit.tp * unit.cp);
  return GroupAllReduceTime_s(2 * (params.trainable - params.replicated), D * share * unit.cp, unit.tp, c) +
         GroupAllReduceTime_s(2 * params.replicated, D * group_gpus, 1, c);
}

std::string StageLabel(const StageSpec& stage) {
  std::string label;
  for (const auto& r : stage.layers) {
    label += fmt::format("{}{}[{}:{}]", label.empty() ? "" : "+", r.module, r.begin, r.end);
  }
  return label;
}

void AddReplica(PlanSimulation& sim, PipelineCosts costs, std::map<std::vector<double>, int>& seen) {
  std::vector<double> signature;
  for (const auto& stage : costs.stage) {
    for (const StageCost& sc : stage) {
      signature.insert(signature.end(),
                       {sc.forward_s, sc.backward_data_s, sc.backward_weight_s, sc.activation_bytes, sc.send_bytes});
    }
  }
  auto [pos, inserted] = seen.emplace(std::move(signature), static_cast<int>(sim.replicas.size()));
  if (inserted) {
    sim.replicas.push_back(std::move(costs));
    sim.replica_weight.push_back(1);
  } else {
    ++sim.replica_weight[pos->second];
  }
}

}  // namespace loom
