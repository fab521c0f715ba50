// Where the runtime runs a plan (runtime/process_layout.h), on DistMM's plan of
// the two-encoder tiny VLM on 2 GPUs: two encoder branches on one GPU each,
// then the backbone's two replicas on both. Checked by hand-derived facts and
// by replaying the processes' orders against the schedule's dependencies: an
// order that could deadlock gets stuck in the replay.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "loom/data/sample_source.h"
#include "loom/pipeline/dependency_graph.h"
#include "loom/plan/compile_plan.h"
#include "loom/runtime/process_layout.h"
#include "loom/spec/cluster.h"
#include "loom/spec/model.h"
#include "loom/spec/workload.h"
#include "loom/strategies/strategy.h"

namespace loom::runtime {
namespace {

struct DistmmOnTwoGpus {
  Model model = LoadModel(std::string(LOOM_TEST_DATA) + "/runtime/tiny-vlm2.yaml");
  Workload workload = LoadWorkload(std::string(LOOM_TEST_DATA) + "/runtime/tiny-laion.yaml");
  Cluster cluster = LoadCluster("h100:1x2");
  Batch batch = DrawBatch(workload, 0);
  Plan plan = RunStrategy("distmm", StrategyContext{model, cluster, workload, batch, {}}).plan;
  ExecutionPlan exec = CompilePlan(model, cluster, workload, plan, batch);
};

TEST(ProcessLayout, UnitsTakingTurnsShareAProcess) {
  const DistmmOnTwoGpus d;
  ASSERT_EQ(d.plan.units.size(), 3u);  // branch0, branch1 (phase 0), backbone (phase 1)
  const ProcessLayout L = LayoutProcesses(d.exec);
  EXPECT_EQ(L.processes, 2);
  ASSERT_EQ(L.of_group.size(), 2u);
  for (int g = 0; g < 2; ++g) {
    ASSERT_EQ(L.of_group[g].size(), 2u) << "group " << g;  // its branch and its backbone replica
    std::set<int> units;
    for (const auto& copy : L.of_group[g]) units.insert(d.exec.ranks[copy.rank].unit);
    EXPECT_EQ(units.size(), 2u);
  }
}

TEST(ProcessLayout, EachStageHandsOnWhatLaterStagesRead) {
  const DistmmOnTwoGpus d;
  const auto handed = StageOutputs(d.model, d.exec);
  const auto loss = LossStages(d.model, d.exec);
  for (size_t v = 0; v < d.exec.stages.size(); ++v) {
    std::set<std::string> names;
    for (const auto& b : handed[v]) names.insert(d.model.modules[b.module].name);
    const std::string& first = d.exec.stages[v].layers.front().module;
    if (first == "vision") {
      EXPECT_EQ(names, std::set<std::string>{"projector"}) << d.exec.stages[v].label;  // not the other branch's
    } else if (first == "coarse") {
      EXPECT_EQ(names, std::set<std::string>{"coarse_projector"}) << d.exec.stages[v].label;
    } else {
      EXPECT_TRUE(loss[v]) << d.exec.stages[v].label;
      EXPECT_TRUE(names.empty()) << d.exec.stages[v].label;
    }
  }
}

TEST(ProcessLayout, MergedOrdersKeepEveryListAndReplayWithoutDeadlock) {
  const DistmmOnTwoGpus d;
  const ProcessLayout L = LayoutProcesses(d.exec);
  const Schedule& s = d.exec.schedule;
  const DependencyGraph g = BuildDependencies(s);
  std::vector<std::vector<int>> orders;  // per process: flat action ids
  for (const auto& copies : L.of_group) {
    std::vector<int> ranks;
    for (const auto& c : copies) ranks.push_back(c.rank);
    const auto order = ProcessOrder(d.exec, ranks);
    std::map<int, int> last_index;
    size_t expected = 0;
    for (int r : ranks) expected += s.ranks[r].size();
    EXPECT_EQ(order.size(), expected);  // every action of its ranks once (indices ascend below)
    std::vector<int> ids;
    for (const auto& [r, i] : order) {
      EXPECT_TRUE(std::find(ranks.begin(), ranks.end(), r) != ranks.end());
      if (last_index.count(r)) {
        EXPECT_EQ(i, last_index[r] + 1) << "rank " << r;
      }
      last_index[r] = i;
      ids.push_back(g.id(r, i));
    }
    orders.push_back(ids);
  }
  // Replay: a process runs its next action once every dependency of it has run
  // (a receive once its send has, a phase's first forward once the other
  // phase's last has) and, for a wait, once every collective of its groups has
  // been issued (Gloo completes a collective only when all members issued it).
  std::vector<bool> done(g.size(), false);
  std::map<int, std::vector<int>> collectives_of_group;
  for (int r = 0; r < s.num_ranks; ++r) {
    for (int i = 0; i < static_cast<int>(s.ranks[r].size()); ++i) {
      if (s.ranks[r][i].kind == ActionKind::kCollective)
        collectives_of_group[s.ranks[r][i].group].push_back(g.id(r, i));
    }
  }
  auto ready = [&](int id) {
    for (int k = g.dep_begin[id]; k < g.dep_begin[id + 1]; ++k) {
      if (!done[g.dep_id[k]]) return false;
    }
    const int r = g.rank[id];
    if (s.ranks[r][id - g.offset[r]].kind != ActionKind::kWait) return true;
    for (const Action& a : s.ranks[r]) {
      if (a.kind != ActionKind::kCollective) continue;
      for (int c : collectives_of_group[a.group]) {
        if (!done[c]) return false;
      }
    }
    return true;
  };
  std::vector<size_t> next(orders.size(), 0);
  for (bool moved = true; moved;) {
    moved = false;
    for (size_t p = 0; p < orders.size(); ++p) {
      while (next[p] < orders[p].size() && ready(orders[p][next[p]])) {
        done[orders[p][next[p]++]] = true;
        moved = true;
      }
    }
  }
  for (size_t p = 0; p < orders.size(); ++p) {
    EXPECT_EQ(next[p], orders[p].size()) << "process " << p << " is stuck";
  }
}

}  // namespace
}  // namespace loom::runtime
