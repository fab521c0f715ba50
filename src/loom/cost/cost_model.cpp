#include "loom/cost/cost_model.h"

#include <map>
#include <mutex>

#include "loom/cost/shipped_profiles.h"

namespace loom {

RooflineCostModel::RooflineCostModel(Efficiency efficiency, std::string name)
    : efficiency_(efficiency), name_(std::move(name)) {
  efficiency_.Validate();
}

ComputeTimes RooflineCostModel::LayerCompute(const Layer&, const TokenStats&, int, const LayerWork& w,
                                             const GpuSpec& gpu) const {
  ComputeTimes t;
  t.forward_s = PhaseTime_s(w, Phase::kForward, gpu, efficiency_);
  t.backward_data_s = PhaseTime_s(w, Phase::kBackwardData, gpu, efficiency_);
  t.backward_weight_s = PhaseTime_s(w, Phase::kBackwardWeight, gpu, efficiency_);
  t.forward_elementwise_s =
      OpTime_s(w.at(Phase::kForward, OpClass::kElementwise), OpClass::kElementwise, gpu, efficiency_);
  return t;
}

std::shared_ptr<const CostModel> DefaultCostModel(const GpuSpec& gpu) {
  // Built once per GPU name and never changed: a cache of immutable models.
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const CostModel>> models;
  std::lock_guard<std::mutex> lock(mu);
  auto found = models.find(gpu.name);
  if (found != models.end()) return found->second;
  std::shared_ptr<const CostModel> m = ShippedProfileModel(gpu);
  if (!m) m = std::make_shared<RooflineCostModel>();
  models.emplace(gpu.name, m);
  return m;
}

const CostModel& CostModelOf(const Cluster& c) {
  if (c.cost_model) return *c.cost_model;
  return *DefaultCostModel(c.gpu);
}

}  // namespace loom
