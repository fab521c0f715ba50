// Entrain as a strategy (seed 004 ch. 4): the deferral-aware schedule (§4.5.3)
// against 1F1B and the worked example, the configuration search (Algorithm 3,
// Eq. 4.1-4.2) by hand and by brute force, and the planner on the thesis'
// models and FineVision-shaped subsets (§4.7).
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "../plan/plan_test_util.h"
#include "../test_util.h"
#include "loom/data/sample_source.h"
#include "loom/pipeline/schedules.h"
#include "loom/plan/compile_plan.h"
#include "loom/plan/plan_json.h"
#include "loom/sim/plan_run.h"
#include "loom/strategies/entrain/config_search.h"
#include "loom/strategies/entrain/deferral_schedule.h"
#include "loom/strategies/entrain/entrain.h"

namespace loom {
namespace {

// With one item per slot, the slot schedule is PipeDream-flush 1F1B exactly.
TEST(EntrainSchedule, OneItemPerSlotIsOneFOneB) {
  for (int p : {1, 2, 4}) {
    for (int m : {1, 3, 8}) {
      const Schedule ref = MakeOneFOneB(p, m, false);
      std::vector<int> slots(m);
      std::iota(slots.begin(), slots.end(), 0);
      for (int r = 0; r < p; ++r) {
        std::vector<StageStep> want;
        for (const Action& a : ref.ranks[r]) {
          if (a.is_compute()) want.push_back({a.kind == ActionKind::kForward, r, a.microbatch});
        }
        EXPECT_EQ(SlotOneFOneB(slots, slots, p - r - 1, r), want) << "p " << p << " m " << m << " rank " << r;
      }
    }
  }
  test::ExpectError([] { SlotOneFOneB({1}, {0}, 1, 0); }, {"before its forward"});
}

// And with backwards split and rank r's weight halves lagged r, ZB-H1's order.
TEST(EntrainSchedule, OneItemPerSlotWithWeightLagIsZbH1) {
  for (int p : {1, 2, 4}) {
    for (int m : {1, 3, 8}) {
      const Schedule ref = MakeZbH1(p, m, false);
      std::vector<int> slots(m);
      std::iota(slots.begin(), slots.end(), 0);
      for (int r = 0; r < p; ++r) {
        std::vector<StageStep> want;
        for (const Action& a : ref.ranks[r]) {
          if (!a.is_compute()) continue;
          StageStep s{a.kind == ActionKind::kForward, r, a.microbatch};
          if (a.kind == ActionKind::kBackwardData) s.part = BackwardPart::kData;
          if (a.kind == ActionKind::kBackwardWeight) s.part = BackwardPart::kWeight;
          want.push_back(s);
        }
        EXPECT_EQ(SlotOneFOneB(slots, slots, p - r - 1, r, r), want) << "p " << p << " m " << m << " rank " << r;
      }
    }
  }
}

// Figs. 4.8-4.10 (notes §4.10): MB6 defers sample 6 (3 units) to MB1, MB3
// defers sample 2 (2 units) to MB2, MB4 pairs with MB5 deferring nothing.
// The encoder runs MB6, MB1, MB3, MB2, MB4, MB5 in slots 0-5; MB6's deferred
// sample is forwarded in slot 0 and backwarded in slot 1 (split backward);
// every LLM microbatch carries 6 units.
TEST(EntrainSchedule, SplitForDeferralOnTheWorkedExample) {
  const std::vector<double> llm = {3, 4, 2, 6, 6, 6, 3, 6};
  const std::vector<std::vector<int>> mb = {{0}, {1}, {2, 3}, {4}, {5}, {6, 7}};
  const ReplicaDeferralSchedule s = SplitForDeferral(mb, PairwiseDeferral(mb, llm));
  const std::vector<std::vector<int>> want_llm = {{7}, {6, 0}, {3}, {2, 1}, {4}, {5}};
  EXPECT_EQ(s.llm_microbatches, want_llm);
  for (const auto& l : s.llm_microbatches) {
    double w = 0;
    for (int x : l) w += llm[x];
    EXPECT_EQ(w, 6);
  }
  // (samples, forward slot, backward slot)
  const std::vector<std::tuple<std::vector<int>, int, int>> want = {{{7}, 0, 0}, {{6}, 0, 1}, {{0}, 1, 1}, {{3}, 2, 2},
                                                                    {{2}, 2, 3}, {{1}, 3, 3}, {{4}, 4, 4}, {{5}, 5, 5}};
  ASSERT_EQ(s.pieces.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(s.pieces[i].samples, std::get<0>(want[i])) << i;
    EXPECT_EQ(s.pieces[i].forward_slot, std::get<1>(want[i])) << i;
    EXPECT_EQ(s.pieces[i].backward_slot, std::get<2>(want[i])) << i;
  }
  EXPECT_EQ(s.deferred_samples, (std::vector<int>{6, 2}));
  // The encoder's last rank before a 2-stage LLM (warm-up 2 slots + 1 eager):
  // the forwards of slots 0-2, then per slot the next forwards and the slot's
  // backwards, the deferred piece's backward one slot after its kept part's.
  std::vector<int> f, b;
  for (const auto& p : s.pieces) f.push_back(p.forward_slot), b.push_back(p.backward_slot);
  const auto order = SlotOneFOneB(f, b, 3, 0);
  std::string text;
  for (const auto& st : order) text += (st.forward ? "F" : "B") + std::to_string(st.microbatch) + " ";
  EXPECT_EQ(text, "F0 F1 F2 F3 F4 F5 B0 F6 B1 B2 F7 B3 B4 B5 B6 B7 ");
}

// Random batches on a disaggregated plan (one replica: encoder pp 2 on groups
// 0-1, llm pp 2 on groups 2-3), eager warm-ups 0, 1, 3 and zero-bubble backwards: every Entrain schedule
// compiles (the validator finds no deadlock), places every sample once per
// unit, and simulates.
TEST(EntrainSchedule, EveryBatchCompilesAndSimulates) {
  test::Fixture f;
  f.workload.microbatch_size = 2;
  Plan p = EmptyPlan(f.ctx(), "entrain", 4);
  p.units.push_back(MakeUnit(f.ctx(), "encoder", {"vision", "projector"}, 0, 4, 0, 1, 2, 8, ScheduleKind::kOneFOneB,
                             Recompute::kFull, Balance::kParams));
  p.units.push_back(
      MakeUnit(f.ctx(), "llm", {"llm"}, 2, 4, 0, 1, 2, 8, ScheduleKind::kOneFOneB, Recompute::kFull, Balance::kParams));
  p.brokers.push_back({"encoder", "llm", 1});
  const LayerCurves curves = FitModelCurves(f.model, f.cluster, ModuleTensorParallel(f.model, p));
  int deferring = 0;
  for (int it = 0; it < 6; ++it) {
    const Batch batch = DrawBatch(f.workload, it);
    for (auto [eager, zb] : std::vector<std::pair<int, bool>>{{0, false}, {1, false}, {3, false}, {1, true}}) {
      const IterationSchedule s = EntrainScheduleBatch(f.model, p, batch, it, curves, {true, eager, zb});
      const auto& enc = s.replica_microbatch_samples.at("encoder")[0];
      const auto& llm = s.replica_microbatch_samples.at("llm")[0];
      deferring += enc.size() > llm.size();
      const ExecutionPlan e = CompilePlan(f.model, f.cluster, f.workload, p, batch, &s);
      const PlanRun run = RunPlan(f.model, f.cluster, f.workload, p, batch, &s);
      EXPECT_GT(run.metrics.iteration_time_s, 0);
      // It round-trips through the plan file format.
      EXPECT_EQ(IterationScheduleFromJson(IterationScheduleToJson(s), "x"), s);
    }
  }
  EXPECT_GT(deferring, 0);
}

// The spine's checks on a batch's own placements and orders.
TEST(EntrainSchedule, BadPlacementsAndOrdersAreErrors) {
  test::Fixture f;
  Plan p = test::DisaggregatedShape(f);  // encoder dp 2, llm dp 2, 4 microbatches of 4 samples
  IterationSchedule it;
  for (int k = 0; k < 4; ++k) it.microbatch_samples.push_back({4 * k, 4 * k + 1, 4 * k + 2, 4 * k + 3});
  it.replica_microbatch_samples["llm"] = {{{0, 1, 2}, {3, 4, 5, 6, 7}}, {{8, 9}, {10, 11}, {12, 13, 14, 15}}};
  EXPECT_NO_THROW(CompilePlan(f.model, f.cluster, f.workload, p, f.batch, &it));  // replicas may differ in counts
  auto bad = it;
  bad.replica_microbatch_samples["llm"].pop_back();
  test::ExpectError([&] { CompilePlan(f.model, f.cluster, f.workload, p, f.batch, &bad); },
                    {"replica_microbatch_samples.llm", "1 replicas, the unit has 2"});
  bad = it;
  bad.replica_microbatch_samples["llm"][0][0] = {};
  test::ExpectError([&] { CompilePlan(f.model, f.cluster, f.workload, p, f.batch, &bad); }, {"an empty microbatch"});
  bad = it;
  bad.replica_microbatch_samples["llm"][1][0] = {8};
  test::ExpectError([&] { CompilePlan(f.model, f.cluster, f.workload, p, f.batch, &bad); }, {"exactly once"});
  // Orders: replica 0 of the llm runs its 2 microbatches backwards first: deadlock.
  bad = it;
  bad.unit_rank_orders["llm"] = {
      {{{false, 0, 0}, {true, 0, 0}, {true, 0, 1}, {false, 0, 1}}},
      {{{true, 0, 0}, {false, 0, 0}, {true, 0, 1}, {false, 0, 1}, {true, 0, 2}, {false, 0, 2}}}};
  test::ExpectError([&] { CompilePlan(f.model, f.cluster, f.workload, p, f.batch, &bad); }, {"unit_rank_orders"});
  bad.unit_rank_orders["llm"][0][0] = {{true, 0, 0}, {false, 0, 0}, {true, 0, 1}};
  test::ExpectError([&] { CompilePlan(f.model, f.cluster, f.workload, p, f.batch, &bad); },
                    {"unit_rank_orders.llm[0]", "exactly one forward and one backward"});
  bad.unit_rank_orders["llm"][0][0] = {{true, 0, 0}, {false, 0, 0}, {true, 0, 5}, {false, 0, 1}};
  test::ExpectError([&] { CompilePlan(f.model, f.cluster, f.workload, p, f.batch, &bad); }, {"no microbatch"});
  bad.unit_rank_orders["llm"][0][0] = {{true, 0, 0}, {false, 0, 0}, {true, 0, 1}, {false, 0, 1}};
  EXPECT_NO_THROW(CompilePlan(f.model, f.cluster, f.workload, p, f.batch, &bad));
}

// Eq. 4.1 + 4.2 by hand: encoder layers 1, 2, 3, 4 on 4 GPUs in groups of 2
// (pp 2; the min-max cut is {1, 2, 3 | 4}: stages 6 and 4, beating 3 and 7),
// llm layers 5, 5 on 2 GPUs (pp 1: 10). T_S = 6 + 4 + 10 + (K - 1) x 10.
TEST(EntrainConfigSearch, Eq42ByHand) {
  ConfigProblem p;
  p.microbatches = 8;
  p.group_gpus = 2;
  p.gpus = {4, 2};
  p.options = {{{2, 1, {1, 2, 3, 4}, {}}}, {{2, 1, {5, 5}, {}}, {1, 2, {4, 4}, {}}}};
  p.reshard_s = {0.5};
  EntrainConfig c;
  ASSERT_TRUE(EvaluateConfig(p, {0, 0}, c));
  EXPECT_EQ(c.components[0].stage_s, (std::vector<double>{6, 4}));
  EXPECT_EQ(c.components[0].stage_layers, (std::vector<int>{3, 1}));
  EXPECT_DOUBLE_EQ(c.pipeline_s, 6 + 4 + 10 + 7 * 10);
  EXPECT_DOUBLE_EQ(c.reshard_s, 0);  // same (TP, CP)
  ASSERT_TRUE(EvaluateConfig(p, {0, 1}, c));
  EXPECT_DOUBLE_EQ(c.pipeline_s, 6 + 4 + 8 + 7 * 8);
  EXPECT_DOUBLE_EQ(c.reshard_s, 8 * 0.5);  // TP 2 -> TP 1 x CP 2: resharded every microbatch
  EXPECT_DOUBLE_EQ(c.throughput, 8 / (74 + 4.0));
  // More stages than layers, or states over the GPU: infeasible.
  p.gpus = {12, 2};
  EXPECT_FALSE(EvaluateConfig(p, {0, 0}, c));
  p.gpus = {4, 2};
  p.options[1][0].state_bytes = {6, 6};
  p.gpu_mem_bytes = 10;
  EXPECT_FALSE(EvaluateConfig(p, {0, 0}, c));
}

// SearchConfigs returns every feasible combination, the first the best, on
// random instances.
TEST(EntrainConfigSearch, BestIsTheMaximumOverEveryCombination) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(0.1, 2.0);
  for (int trial = 0; trial < 50; ++trial) {
    ConfigProblem p;
    p.microbatches = 1 + trial % 9;
    p.group_gpus = 2;
    p.gpus = {2 * (1 + trial % 3), 2 * (1 + trial % 2), 2};
    p.reshard_s = {u(rng) / 10, u(rng) / 10};
    for (int c = 0; c < 3; ++c) {
      p.options.emplace_back();
      for (auto [tp, cp] : std::vector<std::pair<int, int>>{{2, 1}, {1, 2}}) {
        ComponentOption o{tp, cp, {}, {}};
        for (int l = 0; l < 5; ++l) o.layer_s.push_back(u(rng));
        p.options.back().push_back(o);
      }
    }
    const auto all = SearchConfigs(p);
    ASSERT_EQ(all.size(), 8u);
    double best = 0;
    for (int a = 0; a < 2; ++a) {
      for (int b = 0; b < 2; ++b) {
        for (int c = 0; c < 2; ++c) {
          EntrainConfig x;
          ASSERT_TRUE(EvaluateConfig(p, {a, b, c}, x));
          best = std::max(best, x.throughput);
        }
      }
    }
    EXPECT_DOUBLE_EQ(all.front().throughput, best);
    for (size_t i = 1; i < all.size(); ++i) EXPECT_GE(all[i - 1].throughput, all[i].throughput);
  }
}

// §4.7's setting: 64 A40s, DP 4, TP 2, microbatch 4, global batch 512. The
// planner plans both thesis models on every FineVision subset, every replica
// splitting its 16 GPUs between encoder and LLM; on Llama3-3b, with the
// -fitted SynthChartNet (tuned to the thesis' ratios, tests/data/finevision_test.cpp),
// b_min is 64 (Table 4.2: unstable to 16, stable from 64) and its split 8:8.
TEST(EntrainStrategy, PlansTheThesisModelsOnEveryFineVisionSubset) {
  const Cluster c = MakeCluster("a40", 16, 4);
  for (const char* model : {"entrain-1b", "entrain-3b"}) {
    const Model m = LoadModel(model);
    for (const char* data : {"synthchartnet", "chartqa", "cocoqa", "llava-150k", "synthchartnet-fitted"}) {
      SCOPED_TRACE(std::string(model) + " " + data);
      const Workload w = LoadWorkload(data);
      const Batch b = DrawBatch(w, 0);
      StrategyContext ctx{m, c, w, b, {}};
      ctx.fixed_dp = 4;
      ctx.fixed_tp = 2;
      const StrategyResult r = RunStrategy("entrain", ctx);
      ASSERT_EQ(r.plan.units.size(), 2u);
      const Unit& enc = r.plan.units[0];
      const Unit& llm = r.plan.units[1];
      EXPECT_EQ(enc.num_replicas(), 4);
      EXPECT_EQ(llm.num_replicas(), 4);
      EXPECT_EQ((enc.pipelines[0].pp + llm.pipelines[0].pp) * r.plan.group_gpus, 16);
      EXPECT_EQ(enc.pipelines[0].microbatches, 32);
      if (std::string(model) == "entrain-3b" && std::string(data) == "synthchartnet-fitted") {
        EXPECT_EQ(enc.pipelines[0].pp, 4);
        EXPECT_NE(r.plan.searched.find("b_min 64 "), std::string::npos) << r.plan.searched;
        EXPECT_NE(r.plan.searched.find("sizes 1 2 4 8 16 32 64;"), std::string::npos) << r.plan.searched;
        EXPECT_NE(r.plan.searched.find("32 unstable{8:8 10:6}"), std::string::npos) << r.plan.searched;
        EXPECT_NE(r.plan.searched.find("64 stable{8:8}"), std::string::npos) << r.plan.searched;
      }
    }
  }
  // A model with no encoder is refused, naming what Entrain needs.
  const Model text = LoadModel("llama3-1b");
  const Workload w = LoadWorkload("text");
  const Batch b = DrawBatch(w, 0);
  test::ExpectError([&] { RunStrategy("entrain", {text, c, w, b, {}}); }, {"no module upstream", "encoder"});
}

}  // namespace
}  // namespace loom
