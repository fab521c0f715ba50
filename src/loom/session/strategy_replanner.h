// The Replanner (plan/replanner.h) of a fault-tolerant run whose plan is not
// Oobleck's (`loom run --plan FILE --fault-tolerance F` with any strategy's
// plan): when nodes fail or come back it asks the plan's own strategy for a
// plan of the nodes there are now, as `loom plan --strategy NAME` would on a
// cluster of that many nodes. The runtime then restores the last checkpoint
// under it (runtime/generation_controller.h): such a plan's state is sliced or
// spread in ways a survivor cannot hand over whole, so the steps since that
// checkpoint are run again. F is Oobleck's planning parameter; here the run
// recovers as long as the strategy finds a plan that fits the nodes left.
#pragma once

#include <set>
#include <string>

#include "loom/plan/replanner.h"
#include "loom/spec/cluster.h"
#include "loom/spec/model.h"
#include "loom/spec/workload.h"

namespace loom {

class StrategyReplanner {
 public:
  // The run's model, cluster and workload outlive the replanner.
  StrategyReplanner(const Model& model, const Cluster& cluster, const Workload& workload, std::string strategy);

  Replanned operator()(const std::vector<int>& failed, const std::vector<int>& joined);

 private:
  const Model& model_;
  const Cluster& cluster_;
  const Workload& workload_;
  std::string strategy_;
  std::set<int> live_;  // original node ids up now
};

}  // namespace loom
