// Cornstarch's first part (strategies/cornstarch/): encoder branches and the
// LLM as parallel pipelines on disjoint GPU groups, and frozen-aware stage
// balancing (Eq. 3.2-3.3 through cost/frozen.h, Eq. 3.5's min-max partition).
#include <gtest/gtest.h>

#include <algorithm>

#include "loom/data/sample_source.h"
#include "loom/pipeline/partition.h"
#include "loom/spec/cluster.h"
#include "loom/spec/model.h"
#include "loom/spec/workload.h"
#include "loom/strategies/cornstarch/cornstarch.h"
#include "loom/strategies/plan_builders.h"
#include "loom/strategies/search/candidate_search.h"

namespace loom {
namespace {

// An MLLM-XYZ model on the thesis' testbed (6 nodes x 4 A40) with its synthetic workload.
struct Testbed {
  explicit Testbed(const std::string& name) : model(LoadModel(name)) {}
  Model model;
  Cluster cluster = LoadCluster("cornstarch-testbed");
  Workload workload = LoadWorkload("cornstarch-synthetic");
  Batch batch = DrawBatch(workload, 0);
  StrategyContext ctx() const { return {model, cluster, workload, batch, {}}; }
};

TEST(CornstarchStrategy, PlansEncoderBranchesBesideTheLlm) {
  const Testbed t("mllm-mms");
  const Cluster& cluster = t.cluster;
  const StrategyResult r = CornstarchPlan(t.ctx(), Balance::kTime, "cornstarch", {false, true});
  // Two encoder branches (vision, audio, each with its projector) and the LLM,
  // at once (phase 0), each on GPU groups of its own.
  ASSERT_EQ(r.plan.units.size(), 3u) << r.config;
  std::vector<std::pair<int, int>> spans;
  for (const Unit& u : r.plan.units) {
    EXPECT_EQ(u.phase, 0) << u.name;
    spans.push_back({u.first_group, u.first_group + u.num_groups()});
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i) EXPECT_LE(spans[i - 1].second, spans[i].first);
  EXPECT_LE(spans.back().second, cluster.num_gpus() / r.plan.group_gpus);
  EXPECT_EQ(r.plan.units.back().modules, std::vector<std::string>{"llm"});
}

// Every encoder branch gets its own parallel configuration: its own depth and
// its own TP (the LLM's, or 1 with the group's GPUs sharing its sequences).
// On MLLM-LLM modality-parallel, the LLM at TP 2 on the A40 pairs, the search
// runs the vision branch at TP 1 (its GPUs sharing the sequences) beside the
// audio branch at TP 2.
TEST(CornstarchStrategy, EachEncoderBranchHasItsOwnTensorParallelism) {
  const Testbed t("mllm-llm");
  const StrategyResult r = CornstarchPlan(t.ctx(), Balance::kTime, "cornstarch", {false, true});
  ASSERT_EQ(r.plan.units.size(), 3u) << r.config;
  const Unit& llm = r.plan.units.back();
  bool own = false;
  for (size_t u = 0; u + 1 < r.plan.units.size(); ++u) own = own || r.plan.units[u].tp != llm.tp;
  EXPECT_TRUE(own) << r.config;
}

// Context parallelism for the LLM is searched only where documents are long
// enough to split (4096 tokens per rank), and is token-balanced.
TEST(CornstarchStrategy, SearchesBalancedContextParallelismForLongSequences) {
  const Model model = LoadModel("mllm-lls");
  const Cluster cluster = LoadCluster("cornstarch-testbed");
  auto plan_at = [&](int64_t seq_len) {
    Workload w = LoadWorkload("text");
    w.global_batch = 8;
    w.source.seq_len = seq_len;
    const Batch batch = DrawBatch(w, 0);
    StrategyContext ctx{model, cluster, w, batch, {}};
    ctx.prune = false;  // every candidate simulated: the counts measure the space searched
    return CornstarchPlan(ctx, Balance::kTime, "cornstarch", {false, true});
  };
  const StrategyResult short_seq = plan_at(2048), long_seq = plan_at(16384);
  EXPECT_GT(long_seq.candidates, short_seq.candidates);  // cp 2 and 4 tried as well
  for (const Unit& u : long_seq.plan.units) {
    if (u.cp > 1) {
      EXPECT_EQ(u.cp_split, CpSplit::kBalanced) << u.name;
    }
  }
  for (const Unit& u : short_seq.plan.units) EXPECT_EQ(u.cp, 1) << u.name;
}

// A frozen encoder feeding a trainable projector and a frozen LLM (Cornstarch's
// setting): the encoder's backward is nearly free, the LLM still pays its
// input gradients. Balanced by frozen-aware times, the slowest of 4 stages
// (priced as it will run) is faster than when balanced as if every layer trained.
// The whole strategy: the colocated pipeline competes with the modality-
// parallel ones; on MLLM-MML (frozen Qwen2-32B behind frozen encoders) the
// frozen-aware cut beats the frozen-unaware one (Table 3.2's effect).
TEST(CornstarchStrategy, FrozenAwarePlansBeatFrozenUnawareOnes) {
  const Testbed t("mllm-mml");
  const StrategyContext ctx = t.ctx();
  CandidateSearch judge(ctx, "judge");
  const double aware = judge.Evaluate(CornstarchStrategy(ctx).plan);
  const double unaware = judge.Evaluate(CornstarchUnawareStrategy(ctx).plan);
  ASSERT_GT(aware, 0);
  EXPECT_LT(aware, unaware * 0.97);
}

// Issue 44: on MLLM-SSS, pure data parallelism fits and frozen-awareness has
// nothing to cut (1.00x); pinned to a pipeline, as the thesis' setting was,
// the frozen-aware cut wins (`loom plan --strategy cornstarch,cornstarch-unaware
// --pp 4`, docs/results/cornstarch.md: 1.03-1.43x over the nine models).
TEST(CornstarchStrategy, PinnedToAPipelineTheFrozenAwareCutWins) {
  const Testbed t("mllm-sss");
  StrategyContext ctx = t.ctx();
  CandidateSearch judge(ctx, "judge");
  EXPECT_DOUBLE_EQ(judge.Evaluate(CornstarchStrategy(ctx).plan), judge.Evaluate(CornstarchUnawareStrategy(ctx).plan));
  ctx.fixed_pp = 4;
  const StrategyResult aware = CornstarchStrategy(ctx), unaware = CornstarchUnawareStrategy(ctx);
  ASSERT_EQ(aware.plan.units.size(), 1u);
  EXPECT_EQ(aware.plan.units[0].pipelines[0].pp, 4);
  EXPECT_EQ(unaware.plan.units[0].pipelines[0].pp, 4);
  EXPECT_LT(judge.Evaluate(aware.plan), judge.Evaluate(unaware.plan) * 0.85);
}

// The thesis' Megatron* baseline pins every encoder and projector to the
// first stage; Cornstarch beats it on MLLM-MMS (the thesis: 1.62x on average).
TEST(CornstarchStrategy, BeatsMegatronWithEncodersOnTheFirstStage) {
  const Testbed t("mllm-mms");
  const StrategyContext ctx = t.ctx();
  const StrategyResult star = EncodersFirstStrategy(ctx);
  const auto& stages = star.plan.units[0].pipelines[0].stages;
  ASSERT_GE(stages.size(), 2u);
  for (const auto& r : stages[0].layers) EXPECT_NE(r.module, "llm");
  for (size_t v = 1; v < stages.size(); ++v) {
    for (const auto& r : stages[v].layers) EXPECT_EQ(r.module, "llm");
  }
  CandidateSearch judge(ctx, "judge");
  EXPECT_LT(judge.Evaluate(CornstarchStrategy(ctx).plan) * 1.2, judge.Evaluate(star.plan));
}

TEST(CornstarchStrategy, FrozenAwareStagesBalanceAFrozenModelBetter) {
  const Testbed t("mllm-mms");
  const Model& model = t.model;
  const StrategyContext ctx = t.ctx();
  const std::vector<std::string> chain = {"vision", "vision_projector", "llm"};
  const auto layers = UnitLayers(model, chain);
  const auto aware = LayerWeights(ctx, layers, Balance::kTime, 1);
  const auto unaware = LayerWeights(ctx, layers, Balance::kTimeFrozenUnaware, 1);
  double frozen_saving = 0;
  for (size_t l = 0; l < aware.size(); ++l) frozen_saving += unaware[l] - aware[l];
  ASSERT_GT(frozen_saving, 0);              // the model has frozen layers whose backward is skipped
  auto slowest = [&](const Partition& p) {  // priced frozen-aware: what runs
    double worst = 0;
    for (size_t s = 0; s + 1 < p.begin.size(); ++s) {
      double t = 0;
      for (int l = p.begin[s]; l < p.begin[s + 1]; ++l) t += aware[l];
      worst = std::max(worst, t);
    }
    return worst;
  };
  const double with_aware = slowest(MinMaxPartition(aware, 4)), with_unaware = slowest(MinMaxPartition(unaware, 4));
  EXPECT_LT(with_aware, with_unaware);
  EXPECT_NEAR(with_aware, MinMaxPartition(aware, 4).max_cost, 1e-9 * with_aware);
}

}  // namespace
}  // namespace loom
