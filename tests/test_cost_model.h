// Test helper: a cluster priced by the roofline cost model with default
// efficiencies, whatever its GPU (an H100 or H800 would otherwise get the
// shipped measured profile): tests whose expected values come from the roofline.
#pragma once

#include <memory>

#include "loom/cost/cost_model.h"
#include "loom/spec/cluster.h"

namespace loom::test {

inline Cluster RooflineCluster(Cluster c) {
  c.cost_model = std::make_shared<const RooflineCostModel>();
  return c;
}

}  // namespace loom::test
