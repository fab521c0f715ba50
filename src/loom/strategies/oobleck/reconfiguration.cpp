#include "loom/strategies/oobleck/reconfiguration.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "loom/strategies/oobleck/instantiation.h"

namespace loom::oobleck {

Reconfiguration Reconfigure(const std::vector<std::vector<int>>& pipelines, const std::vector<int>& failed,
                            const TemplateSizes& templates) {
  Reconfiguration r;
  const std::set<int> dead(failed.begin(), failed.end());
  const int n0 = templates.min_nodes, f = templates.fault_tolerance;
  // Survivors per pipeline; which ones lost nodes.
  std::vector<std::vector<int>> p;
  std::vector<bool> hit;
  for (const auto& nodes : pipelines) {
    std::vector<int> alive;
    for (int n : nodes) {
      if (!dead.count(n)) alive.push_back(n);
    }
    if (alive.empty()) continue;  // the whole pipeline is gone
    hit.push_back(alive.size() != nodes.size());
    p.push_back(std::move(alive));
  }
  int left = 0;
  for (const auto& q : p) left += static_cast<int>(q.size());
  auto cannot = [&](const std::string& why) {
    r.recovered = false;
    r.outcome = fmt::format("cannot recover: {} nodes left, need {} ({} pipelines of at least {} nodes){}", left,
                            (f + 1) * n0, f + 1, n0, why.empty() ? "" : "; " + why);
    r.pipelines = p;
    return r;
  };
  if (left < (f + 1) * n0) return cannot("");
  for (size_t i = 0; i < p.size(); ++i) {
    if (!hit[i]) continue;
    if (static_cast<int>(p[i].size()) >= n0) {
      r.steps.push_back(RecoveryStep::kSimple);  // templates cover n0 .. N - f n0, and it only shrank
      continue;
    }
    // Borrow from the pipelines with the most nodes above n0.
    while (static_cast<int>(p[i].size()) < n0) {
      int lender = -1;
      for (size_t j = 0; j < p.size(); ++j) {
        if (j == i || static_cast<int>(p[j].size()) <= n0) continue;
        if (lender < 0 || p[j].size() > p[lender].size()) lender = static_cast<int>(j);
      }
      if (lender < 0) break;
      p[i].push_back(p[lender].back());  // the lender gives its last node
      p[lender].pop_back();
      std::sort(p[i].begin(), p[i].end());
    }
    if (static_cast<int>(p[i].size()) >= n0) {
      r.steps.push_back(RecoveryStep::kBorrow);
      continue;
    }
    // Merge with the smallest other pipeline (Theorem 2).
    int with = -1;
    for (size_t j = 0; j < p.size(); ++j) {
      if (j != i && (with < 0 || p[j].size() < p[with].size())) with = static_cast<int>(j);
    }
    if (with < 0) return cannot("no pipeline to merge with");
    p[i].insert(p[i].end(), p[with].begin(), p[with].end());
    std::sort(p[i].begin(), p[i].end());
    p.erase(p.begin() + with);
    hit.erase(hit.begin() + with);
    if (with < static_cast<int>(i)) --i;
    r.steps.push_back(RecoveryStep::kMerge);
  }
  for (const auto& q : p) {
    if (!templates.Has(static_cast<int>(q.size()))) {
      return cannot(fmt::format("no template of {} nodes", q.size()));
    }
  }
  if (static_cast<int>(p.size()) < f + 1) {
    // Whole pipelines were lost: re-instantiate every surviving node.
    std::vector<std::vector<int>> best_x;
    int best_count = 0;
    for (const auto& x : FeasibleInstantiations(left, templates)) {
      const int count = std::accumulate(x.begin(), x.end(), 0);
      // Fewest pipelines (deeper pipelines keep more of the old layout), then
      // the most large templates.
      if (best_x.empty() || count < best_count ||
          (count == best_count &&
           std::lexicographical_compare(best_x[0].rbegin(), best_x[0].rend(), x.rbegin(), x.rend()))) {
        best_x = {x};
        best_count = count;
      }
    }
    if (best_x.empty()) return cannot("no split into templates");
    std::vector<int> order;  // surviving nodes, old pipeline by old pipeline
    for (const auto& q : p) order.insert(order.end(), q.begin(), q.end());
    std::vector<std::vector<int>> fresh;
    size_t next = 0;
    for (int j = static_cast<int>(best_x[0].size()) - 1; j >= 0; --j) {
      for (int k = 0; k < best_x[0][j]; ++k) {
        fresh.emplace_back(order.begin() + next, order.begin() + next + templates.nodes[j]);
        std::sort(fresh.back().begin(), fresh.back().end());
        next += templates.nodes[j];
      }
    }
    p = std::move(fresh);
    r.steps.push_back(RecoveryStep::kReinstantiate);
  }
  r.recovered = true;
  r.pipelines = p;
  std::vector<std::string> kinds;
  for (RecoveryStep s : r.steps) {
    kinds.push_back(s == RecoveryStep::kSimple   ? "simple"
                    : s == RecoveryStep::kBorrow ? "borrow"
                    : s == RecoveryStep::kMerge  ? "merge"
                                                 : "re-instantiate all");
  }
  r.outcome = fmt::format("recovered: {} pipelines on {} nodes ({})", p.size(), left,
                          kinds.empty() ? std::string("every pipeline that lost nodes lost all of them")
                                        : fmt::format("{}", fmt::join(kinds, ", ")));
  return r;
}

std::vector<std::vector<int>> AddNodes(const std::vector<std::vector<int>>& pipelines, const std::vector<int>& joined,
                                       const TemplateSizes& templates) {
  std::vector<std::vector<int>> p = pipelines;
  std::vector<int> spare(joined.begin(), joined.end());
  std::sort(spare.begin(), spare.end());
  for (int node : spare) {
    int to = -1;
    for (size_t j = 0; j < p.size(); ++j) {
      if (!templates.Has(static_cast<int>(p[j].size()) + 1)) continue;
      if (to < 0 || p[j].size() < p[to].size()) to = static_cast<int>(j);
    }
    if (to < 0) {  // every pipeline is at the largest template: a new one-node pipeline if it is a template
      if (templates.Has(1)) p.push_back({node});
      continue;
    }
    p[to].push_back(node);
  }
  return p;
}

}  // namespace loom::oobleck
