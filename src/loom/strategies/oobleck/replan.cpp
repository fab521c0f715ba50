#include "loom/strategies/oobleck/replan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>

#include "loom/data/sample_source.h"
#include "loom/error.h"
#include "loom/strategies/oobleck/reconfiguration.h"

namespace loom {

using namespace oobleck;

OobleckReplanner::OobleckReplanner(const Model& model, const Cluster& cluster, const Workload& workload,
                                   const Plan& plan, int fault_tolerance)
    : model_(model), cluster_(cluster), workload_(workload), original_(plan) {
  if (plan.strategy != "oobleck" || plan.units.size() != 1) {
    throw Error(
        fmt::format("--fault-tolerance: re-planning after failures uses Oobleck's pipeline templates; this "
                    "plan is {}'s (plan one with `loom plan --strategy oobleck --fault-tolerance {}`)",
                    plan.strategy, fault_tolerance));
  }
  const Unit& u = plan.units[0];
  int64_t microbatches = 0;
  for (const auto& ps : u.pipelines) microbatches += static_cast<int64_t>(ps.replicas) * ps.microbatches;
  if (microbatches <= 0 || workload.global_batch % microbatches != 0) {
    throw Error(fmt::format("--fault-tolerance: the plan's {} microbatches do not divide the global batch of {}",
                            microbatches, workload.global_batch));
  }
  const Batch batch = DrawBatch(workload, 0);
  StrategyContext ctx{model, cluster, workload, batch, {}};
  ctx.fault_tolerance = fault_tolerance;
  OobleckOptions options;
  options.fault_tolerance = fault_tolerance;
  options.microbatch_samples = static_cast<int>(workload.global_batch / microbatches);
  options.simulated = 1 << 20;  // every ranked solution: pick the one of the plan's recomputation
  const std::vector<OobleckSolution> solutions = SolveOobleck(ctx, options);
  solution_ = solutions.front();
  for (const auto& s : solutions) {
    if (s.recompute == u.recompute) {
      solution_ = s;
      break;
    }
  }
  for (const auto& t : solution_.templates) {
    double slowest = 0;
    for (const auto& s : t.stages) slowest = std::max(slowest, s.time_s);
    microbatch_s_.push_back(slowest);
  }
  // The plan's pipelines on consecutive nodes, in plan order.
  int next = 0;
  for (const auto& ps : u.pipelines) {
    int gpus = 0;
    for (int g : ps.rank_groups) gpus += g * plan.group_gpus;
    if (ps.rank_groups.empty()) gpus = ps.pp * plan.group_gpus;
    if (gpus % cluster.gpus_per_node != 0) {
      throw Error(
          fmt::format("--fault-tolerance: a pipeline of the plan runs on {} GPUs, not whole nodes of {}; "
                      "Oobleck's pipelines own whole nodes",
                      gpus, cluster.gpus_per_node));
    }
    for (int r = 0; r < ps.replicas; ++r) {
      pipelines_.emplace_back();
      for (int n = 0; n < gpus / cluster.gpus_per_node; ++n) pipelines_.back().push_back(next++);
    }
  }
  if (next > cluster.nodes) {
    throw Error(
        fmt::format("--fault-tolerance: the plan's pipelines need {} nodes; the cluster has {}", next, cluster.nodes));
  }
  for (const auto& p : pipelines_) {
    if (!solution_.sizes.Has(static_cast<int>(p.size()))) {
      throw Error(
          fmt::format("--fault-tolerance: the plan has a pipeline of {} nodes, but the templates for f = {} "
                      "span {}-{} nodes",
                      p.size(), fault_tolerance, solution_.sizes.nodes.front(), solution_.sizes.max_nodes()));
    }
  }
}

Replanned OobleckReplanner::operator()(const std::vector<int>& failed, const std::vector<int>& joined) {
  Replanned out;
  std::vector<std::vector<int>> next = pipelines_;
  if (!failed.empty()) {
    const Reconfiguration r = Reconfigure(next, failed, solution_.sizes);
    out.outcome = r.outcome;
    if (!r.recovered) return out;
    next = r.pipelines;
  }
  if (!joined.empty()) {
    next = AddNodes(next, joined, solution_.sizes);
    out.outcome += fmt::format("{}node(s) {} joined", out.outcome.empty() ? "" : "; ", fmt::join(joined, ", "));
  }
  // Pipelines per template, and the node order BuildOobleckPlan lays them
  // out in: larger templates first, pipelines of one size in their order.
  const auto& sizes = solution_.sizes.nodes;
  std::vector<int> x(sizes.size(), 0);
  for (const auto& p : next) ++x[std::find(sizes.begin(), sizes.end(), static_cast<int>(p.size())) - sizes.begin()];
  const int total = static_cast<int>(workload_.global_batch / solution_.microbatch_samples);
  OobleckSolution sol = solution_;
  sol.instantiation = x;
  std::string split;
  try {
    sol.batch = DistributeBatch(x, microbatch_s_, total);
    for (int j = static_cast<int>(sizes.size()) - 1; j >= 0; --j) {
      for (const auto& p : next) {
        if (static_cast<int>(p.size()) == sizes[j]) out.nodes.insert(out.nodes.end(), p.begin(), p.end());
      }
    }
    split = fmt::format("{}, microbatches per pipeline {}", DescribeInstantiation(x, sizes), [&] {
      std::vector<int> used;
      for (size_t j = 0; j < x.size(); ++j) {
        if (x[j] > 0) used.push_back(sol.batch.microbatches[j]);
      }
      return fmt::format("{}", fmt::join(used, "/"));
    }());
  } catch (const Error& per_template) {
    // Pipelines of one template then take different counts: Eq. 2.6 per
    // pipeline (its objective is indexed by pipeline in the thesis), each
    // pipeline its own entry of the plan. 8 microbatches over 3 equal
    // pipelines split 3/3/2 instead of stopping the run.
    if (next.size() > 12) {
      out.outcome = fmt::format("cannot recover: {} ({})", per_template.what(), out.outcome);
      return out;
    }
    std::vector<size_t> order(next.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return next[a].size() < next[b].size(); });
    sol.templates.clear();
    std::vector<double> per_mb;
    for (size_t i : order) {
      const size_t j = std::find(sizes.begin(), sizes.end(), static_cast<int>(next[i].size())) - sizes.begin();
      sol.templates.push_back(solution_.templates[j]);
      per_mb.push_back(microbatch_s_[j]);
    }
    sol.instantiation.assign(next.size(), 1);
    try {
      sol.batch = DistributeBatch(sol.instantiation, per_mb, total);
    } catch (const Error& e) {
      out.outcome = fmt::format("cannot recover: {} ({})", e.what(), out.outcome);
      return out;
    }
    for (int k = static_cast<int>(order.size()) - 1; k >= 0; --k) {
      out.nodes.insert(out.nodes.end(), next[order[k]].begin(), next[order[k]].end());
    }
    std::vector<int> counts(sol.batch.microbatches.rbegin(), sol.batch.microbatches.rend());
    split = fmt::format(
        "{} pipelines of {} node(s), microbatches per pipeline {} (the batch split pipeline by "
        "pipeline)",
        next.size(),
        [&] {
          std::vector<size_t> n;
          for (int k = static_cast<int>(order.size()) - 1; k >= 0; --k) n.push_back(next[order[k]].size());
          return fmt::format("{}", fmt::join(n, "/"));
        }(),
        fmt::join(counts, "/"));
  }
  Cluster now = cluster_;
  now.nodes = static_cast<int>(out.nodes.size());
  const Batch batch = DrawBatch(workload_, 0);
  const StrategyContext ctx{model_, now, workload_, batch, {}};
  out.plan = BuildOobleckPlan(ctx, sol);
  out.plan.units[0].recompute = original_.units[0].recompute;
  out.plan.units[0].zero_stage = original_.units[0].zero_stage;
  out.plan.searched = original_.searched;
  out.outcome += fmt::format("; {} on {} node(s) (Eq. 2.6)", split, out.nodes.size());
  out.recovered = true;
  pipelines_ = next;
  return out;
}

}  // namespace loom
