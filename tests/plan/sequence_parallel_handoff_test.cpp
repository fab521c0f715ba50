// Which stages hand their TP ranks' own sequence rows to the next stage
// (plan/sequence_parallel_handoff.h), and what the simulator then prices for
// the send: Megatron-LM's p2p tensor under sequence parallelism is
// [seq / tp, batch, hidden] (schedules.py get_tensor_shapes).
#include "loom/plan/sequence_parallel_handoff.h"

#include <gtest/gtest.h>

#include "loom/data/sample_source.h"
#include "loom/plan/compile_plan.h"
#include "loom/sim/price_execution.h"
#include "loom/spec/cluster.h"
#include "loom/spec/model.h"
#include "loom/spec/workload.h"
#include "loom/strategies/plan_builders.h"

namespace loom {
namespace {

struct Llm {
  Model model = LoadModel("llama3-1b");
  Cluster cluster = MakeCluster("h100", 1, 4);
  Workload workload = [] {
    Workload w = LoadWorkload("text");
    w.global_batch = 8;
    return w;
  }();
  Batch batch = DrawBatch(workload, 0);

  // TP 2 x PP 2 (1F1B, 4 microbatches), stages cut by parameters.
  Plan TpPp() const {
    const StrategyContext ctx{model, cluster, workload, batch, {}};
    return SingleUnitPlan(ctx, "megatron", 2, 2, 1, 1, 4, ScheduleKind::kOneFOneB, Recompute::kNone, Balance::kParams,
                          1);
  }
  ExecutionPlan Compile(const Plan& p) const { return CompilePlan(model, cluster, workload, p, batch); }
};

TEST(SequenceParallelHandoff, TwoStagesCutBetweenTransformerLayersHandOnEachTpRanksRows) {
  const Llm s;
  const Plan p = s.TpPp();
  const auto& stages = p.units[0].pipelines[0].stages;
  ASSERT_EQ(stages.size(), 2u);
  ASSERT_EQ(stages[0].layers.back().module, "llm");  // the cut falls inside the LLM's blocks
  const ExecutionPlan exec = s.Compile(p);
  const SequenceParallelHandoffs h = SequenceParallelHandoffsOf(s.model, exec);
  EXPECT_EQ(h.out, (std::vector<bool>{true, false}));
  EXPECT_EQ(h.in, (std::vector<bool>{false, true}));

  // The send carries 1/tp of the output: tokens x hidden x 2 B (bf16) / 2.
  Plan whole = p;
  whole.units[0].sequence_parallel = false;
  const ExecutionPlan whole_exec = s.Compile(whole);
  const SequenceParallelHandoffs none = SequenceParallelHandoffsOf(s.model, whole_exec);
  EXPECT_EQ(none.out, (std::vector<bool>{false, false}));
  const ExecutionCosts rows = PriceExecution(exec, s.model, s.cluster, s.batch);
  const ExecutionCosts all = PriceExecution(whole_exec, s.model, s.cluster, s.batch);
  const int64_t hidden = s.model.modules[0].layers[1].hidden;
  for (int k = 0; k < 4; ++k) {
    const double whole_bytes = all.replicas[0].at(0, k).send_bytes;
    EXPECT_GT(whole_bytes, 0);
    EXPECT_EQ(std::fmod(whole_bytes, 2.0 * static_cast<double>(hidden)), 0.0) << "tokens x hidden x 2 B";
    EXPECT_DOUBLE_EQ(rows.replicas[0].at(0, k).send_bytes, whole_bytes / 2) << "microbatch " << k;
  }
}

TEST(SequenceParallelHandoff, AnEmbeddingHandsOnRowsAHeadOrContextParallelismWhole) {
  const Llm s;
  // The first stage ends with the token embedding, whose output Megatron's
  // embedding scatters into the sequence split itself: rows go.
  Plan embedding_only = s.TpPp();
  auto& st = embedding_only.units[0].pipelines[0].stages;
  const int layers = static_cast<int>(s.model.modules[0].layers.size());
  st[0].layers = {{"llm", 0, 1}};
  st[1].layers = {{"llm", 1, layers}};
  EXPECT_EQ(SequenceParallelHandoffsOf(s.model, s.Compile(embedding_only)).out, (std::vector<bool>{true, false}));

  // The second stage starts with the head.
  Plan head_only = s.TpPp();
  auto& hs = head_only.units[0].pipelines[0].stages;
  hs[0].layers = {{"llm", 0, layers - 1}};
  hs[1].layers = {{"llm", layers - 1, layers}};
  EXPECT_EQ(SequenceParallelHandoffsOf(s.model, s.Compile(head_only)).out, (std::vector<bool>{false, false}));

  // Context parallelism beside TP: no sequence split of Megatron's kind to hand on.
  Plan cp = s.TpPp();
  cp.units[0].cp = 2;
  cp.group_gpus = 4;
  Cluster eight = MakeCluster("h100", 1, 8);
  const ExecutionPlan cp_exec = CompilePlan(s.model, eight, s.workload, cp, s.batch);
  EXPECT_EQ(SequenceParallelHandoffsOf(s.model, cp_exec).out, (std::vector<bool>{false, false}));
}

}  // namespace
}  // namespace loom
