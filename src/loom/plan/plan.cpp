#include "loom/plan/plan.h"

namespace loom {

int PipelineSpec::groups() const {
  if (rank_groups.empty()) return pp;
  int n = 0;
  for (int g : rank_groups) n += g;
  return n;
}

int Unit::num_groups() const {
  int n = 0;
  for (const auto& p : pipelines) n += p.replicas * p.groups();
  return n;
}

int Unit::num_replicas() const {
  int n = 0;
  for (const auto& p : pipelines) n += p.replicas;
  return n;
}

int Plan::FindUnit(const std::string& name) const {
  for (size_t i = 0; i < units.size(); ++i) {
    if (units[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace loom
