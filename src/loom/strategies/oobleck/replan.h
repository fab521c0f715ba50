// Oobleck §2.5 on a running job (`loom run --fault-tolerance F`): the
// Replanner (plan/replanner.h) the runtime calls when nodes fail or come
// back. It keeps which original nodes form which pipeline, reconfigures them
// (reconfiguration.h: simple re-instantiation, borrowing, merging, or all
// pipelines anew; node joins to the smallest pipeline), re-distributes the
// batch over the new pipelines (Eq. 2.6) and builds their plan from the same
// templates, so a survivor's stages keep the template's layer ranges.
//
// The templates are the planner's own (SolveOobleck at the plan's
// microbatch size, the solution of the plan's recomputation); the starting
// pipelines are read off the plan: pipelines in plan order, each on
// consecutive whole nodes from node 0 (BuildOobleckPlan's layout).
#pragma once

#include <vector>

#include "loom/plan/replanner.h"
#include "loom/strategies/oobleck/oobleck.h"

namespace loom {

class OobleckReplanner {
 public:
  // Throws loom::Error when `plan` is not an Oobleck plan for `cluster`.
  OobleckReplanner(const Model& model, const Cluster& cluster, const Workload& workload, const Plan& plan,
                   int fault_tolerance);

  Replanned operator()(const std::vector<int>& failed, const std::vector<int>& joined);

  // Original node ids of each pipeline now.
  const std::vector<std::vector<int>>& pipelines() const { return pipelines_; }

 private:
  const Model& model_;
  const Cluster& cluster_;
  const Workload& workload_;
  Plan original_;
  OobleckSolution solution_;          // templates, sizes, microbatch size
  std::vector<double> microbatch_s_;  // T_j per template
  std::vector<std::vector<int>> pipelines_;
};

}  // namespace loom
