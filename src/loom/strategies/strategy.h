// A strategy turns (model, cluster, workload) into a Plan. Each one searches
// its own space on a representative batch and says what it searched
// (Plan::searched). Baselines (strategies/baselines/) reproduce the systems the
// seed papers compare against; seed systems come in their own folders.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "loom/data/sample.h"
#include "loom/plan/plan.h"
#include "loom/spec/cluster.h"
#include "loom/spec/model.h"
#include "loom/spec/workload.h"

namespace loom {

struct StrategyContext {
  const Model& model;
  const Cluster& cluster;
  const Workload& workload;
  const Batch& representative;  // the batch static plans are tuned on
  // Called with a short status line as the search goes ("megatron: 120/480");
  // may be empty.
  std::function<void(const std::string&)> progress;
};

struct StrategyResult {
  Plan plan;
  std::string config;       // one-line summary: "tp4 pp4 dp1 m16 interleaved(vpp2) recompute=full"
  int candidates = 0;       // configurations simulated
  int feasible = 0;         // of which fit in memory
};

// Every registered strategy name, in report order (megatron first).
std::vector<std::string> StrategyNames();
// One-line description of a strategy (for --help and reports).
std::string StrategyDescription(const std::string& name);
// Throws loom::Error for an unknown name (listing the valid ones) or when the
// strategy finds no plan that fits (saying what it tried).
StrategyResult RunStrategy(const std::string& name, const StrategyContext& context);

}  // namespace loom
