#include "loom/strategies/oobleck/template_sizes.h"

#include <fmt/format.h>

#include "loom/error.h"

namespace loom::oobleck {

TemplateSizes TemplateNodeCounts(int nodes, int fault_tolerance, int min_nodes) {
  if (fault_tolerance < 0) {
    throw Error(fmt::format("oobleck: --fault-tolerance is {}; it must be >= 0", fault_tolerance));
  }
  if (min_nodes < 1) throw Error(fmt::format("oobleck: n0 is {}; a template needs at least 1 node", min_nodes));
  const int need = (fault_tolerance + 1) * min_nodes;
  if (nodes < need) {
    throw Error(
        fmt::format("oobleck: fault tolerance {} needs f + 1 = {} pipelines of at least {} node(s) (what "
                    "holds the model's training state), {} nodes; the cluster has {}",
                    fault_tolerance, fault_tolerance + 1, min_nodes, need, nodes));
  }
  TemplateSizes t;
  t.min_nodes = min_nodes;
  t.fault_tolerance = fault_tolerance;
  // All but one of the f + 1 pipelines at n0, the last takes the rest.
  for (int n = min_nodes; n <= nodes - fault_tolerance * min_nodes; ++n) t.nodes.push_back(n);
  return t;
}

bool SplitsIntoTemplates(int nodes, const std::vector<int>& sizes, int pipelines) {
  // most[n]: the most pipelines that exactly cover n nodes (-1: none).
  std::vector<int> most(nodes + 1, -1);
  most[0] = 0;
  for (int n = 1; n <= nodes; ++n) {
    for (int s : sizes) {
      if (s <= n && most[n - s] >= 0) most[n] = std::max(most[n], most[n - s] + 1);
    }
  }
  return most[nodes] >= pipelines;
}

}  // namespace loom::oobleck
