#include "loom/plan/plan.h"

namespace loom {

int Unit::num_groups() const {
  int n = 0;
  for (const auto& p : pipelines) n += p.replicas * p.pp;
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
