#include "loom/session/strategy_replanner.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "loom/data/sample_source.h"
#include "loom/error.h"
#include "loom/strategies/strategy.h"

namespace loom {

StrategyReplanner::StrategyReplanner(const Model& model, const Cluster& cluster, const Workload& workload,
                                     std::string strategy)
    : model_(model), cluster_(cluster), workload_(workload), strategy_(std::move(strategy)) {
  for (int n = 0; n < cluster.nodes; ++n) live_.insert(n);
}

Replanned StrategyReplanner::operator()(const std::vector<int>& failed, const std::vector<int>& joined) {
  for (int n : failed) live_.erase(n);
  for (int n : joined) live_.insert(n);
  Replanned out;
  const std::string what =
      fmt::format("{}{}{}", failed.empty() ? "" : fmt::format("node(s) {} lost", fmt::join(failed, ", ")),
                  !failed.empty() && !joined.empty() ? "; " : "",
                  joined.empty() ? "" : fmt::format("node(s) {} joined", fmt::join(joined, ", ")));
  if (live_.empty()) {
    out.outcome = fmt::format("cannot recover: {}, no node left", what);
    return out;
  }
  Cluster now = cluster_;
  now.nodes = static_cast<int>(live_.size());
  const Batch first = DrawBatch(workload_, 0);
  try {
    out.plan = RunStrategy(strategy_, StrategyContext{model_, now, workload_, first, {}}).plan;
  } catch (const Error& e) {
    out.outcome =
        fmt::format("cannot recover: {}; {} finds no plan on {} node(s): {}", what, strategy_, now.nodes, e.what());
    return out;
  }
  out.recovered = true;
  out.nodes.assign(live_.begin(), live_.end());
  out.outcome = fmt::format("{}; re-planned by {} on {} node(s)", what, strategy_, now.nodes);
  return out;
}

}  // namespace loom
