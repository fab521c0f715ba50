// What a fault-tolerant run (`loom run --fault-tolerance`, runtime/run.h)
// asks its planner when nodes fail or come back: a plan for the nodes it has
// now. The strategy keeps its own state between calls (Oobleck: which nodes
// form which pipeline, strategies/oobleck/replan.h); the runtime only runs
// what it gets. Nodes are named by their index in the cluster the run started on.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "loom/plan/plan.h"

namespace loom {

struct Replanned {
  bool recovered = false;
  std::string outcome;     // what the planner did, or why it cannot go on ("cannot recover: ...")
  Plan plan;               // for nodes.size() nodes of the original cluster's kind
  std::vector<int> nodes;  // node i of the new plan's cluster is this original node
};

// `failed`: nodes lost at once; `joined`: nodes back. Calls come in event order.
using Replanner = std::function<Replanned(const std::vector<int>& failed, const std::vector<int>& joined)>;

}  // namespace loom
