#include "loom/cost/cost_model.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>

#include "loom/cost/profile.h"
#include "loom/cost/shipped_profiles.h"
#include "loom/did_you_mean.h"
#include "loom/error.h"

namespace loom {

RooflineCostModel::RooflineCostModel(Efficiency efficiency, std::string name)
    : efficiency_(efficiency), name_(std::move(name)) {
  efficiency_.Validate();
}

ComputeTimes RooflineCostModel::LayerCompute(const Layer&, const TokenStats&, int, const LayerWork& w,
                                             const GpuSpec& spec, Precision precision) const {
  const GpuSpec gpu = AtPrecision(spec, precision);
  ComputeTimes t;
  t.forward_s = PhaseTime_s(w, Phase::kForward, gpu, efficiency_);
  t.backward_data_s = PhaseTime_s(w, Phase::kBackwardData, gpu, efficiency_);
  t.backward_weight_s = PhaseTime_s(w, Phase::kBackwardWeight, gpu, efficiency_);
  t.forward_elementwise_s =
      OpTime_s(w.at(Phase::kForward, OpClass::kElementwise), OpClass::kElementwise, gpu, efficiency_);
  return t;
}

double RooflineCostModel::ElementwiseTime_s(double bytes, const GpuSpec& gpu) const {
  return OpTime_s({0, bytes}, OpClass::kElementwise, gpu, efficiency_);
}

std::shared_ptr<const CostModel> DefaultCostModel(const GpuSpec& gpu) {
  static const std::shared_ptr<const CostModel> roofline = std::make_shared<const RooflineCostModel>();
  std::shared_ptr<const CostModel> shipped = ShippedProfileModel(gpu);
  return shipped ? shipped : roofline;
}

namespace {

Profile LoadProfileFor(const std::string& value, const GpuSpec& gpu) {
  if (!std::filesystem::exists(value)) {
    throw Error(
        fmt::format("--profile {}: neither a built-in cost model nor a file; valid: default, roofline, or a "
                    "profile YAML (`loom profile --out FILE`){}",
                    value, DidYouMean(value, {"default", "roofline"})));
  }
  Profile p = LoadProfile(value);
  if (p.gpu != gpu.name && std::find(p.applies_to.begin(), p.applies_to.end(), gpu.name) == p.applies_to.end()) {
    throw Error(
        fmt::format("{}: the profile was measured on {} (applies to {}), but the cluster's GPUs are {}; "
                    "profile this GPU or pass --profile roofline",
                    value, p.gpu, fmt::join(p.applies_to, ", "), gpu.name));
  }
  return p;
}

}  // namespace

std::shared_ptr<const CostModel> SelectCostModel(const std::string& value, const GpuSpec& gpu) {
  if (value == "roofline") return std::make_shared<const RooflineCostModel>();
  if (value == "default" || value.empty()) return DefaultCostModel(gpu);
  return std::make_shared<const ProfiledCostModel>(LoadProfileFor(value, gpu));
}

void ApplyCostModel(Cluster& cluster, const std::string& value) {
  if (value == "roofline" || value == "default" || value.empty()) {
    cluster.cost_model = SelectCostModel(value, cluster.gpu);
    return;
  }
  Profile p = LoadProfileFor(value, cluster.gpu);
  if (p.link.bytes_per_s > 0) cluster.nvlink = cluster.pcie = cluster.network = p.link;
  if (p.collective.bytes_per_s > 0) cluster.collective = p.collective;
  cluster.cost_model = std::make_shared<const ProfiledCostModel>(std::move(p));
}

const CostModel& CostModelOf(const Cluster& c) {
  if (c.cost_model) return *c.cost_model;
  return *DefaultCostModel(c.gpu);
}

}  // namespace loom
