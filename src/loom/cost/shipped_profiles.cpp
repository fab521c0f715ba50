#include "loom/cost/shipped_profiles.h"

#include <algorithm>
#include <map>

#include "loom/cost/profile.h"
#include "loom/cost/profile_data.h"

namespace loom {

namespace {

// Every shipped profile's model, by GPU name; built once, immutable after.
std::map<std::string, std::shared_ptr<const CostModel>> BuildShipped() {
  std::map<std::string, std::shared_ptr<const CostModel>> out;
  for (const auto& f : profile_data::Files()) {
    auto model = std::make_shared<const ProfiledCostModel>(ParseProfile(f.text, std::string("<built-in>/") + f.name));
    for (const auto& gpu : model->profile().applies_to) out.emplace(gpu, model);
  }
  return out;
}

}  // namespace

std::shared_ptr<const CostModel> ShippedProfileModel(const GpuSpec& gpu) {
  static const std::map<std::string, std::shared_ptr<const CostModel>> shipped = BuildShipped();
  auto found = shipped.find(gpu.name);
  return found == shipped.end() ? nullptr : found->second;
}

}  // namespace loom
