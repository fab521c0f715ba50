#include "loom/report/rank_names.h"

#include <fmt/format.h>

namespace loom {

std::vector<std::string> SimulatedRankNames(const PlanRun& run) {
  std::vector<std::string> names;
  const int p = run.exec.schedule.num_ranks;
  for (int i = 0; i < run.result.num_ranks(); ++i) {
    names.push_back(run.costs.replicas.size() > 1 ? fmt::format("replica {} {}", i / p, run.exec.ranks[i % p].name)
                                                  : run.exec.ranks[i % p].name);
  }
  return names;
}

}  // namespace loom
