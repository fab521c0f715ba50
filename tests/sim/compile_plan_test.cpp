// The simulator executes every plan shape, checked against equivalent
// layouts and the invariants each shape promises.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <tuple>
#include <utility>

#include "loom/cost/collectives.h"
#include "loom/cost/memory.h"
#include "loom/pipeline/validate.h"
#include "loom/plan/compile_plan.h"
#include "loom/plan/validate_plan.h"
#include "loom/sim/plan_run.h"
#include "loom/sim/price_execution.h"
#include "plan/plan_test_util.h"
#include "test_util.h"

namespace loom {
namespace {

// Start and end of every compute action of `kind` on simulated rank `rank`.
std::vector<Interval> ComputeIntervals(const PlanRun& run, int rank, ActionKind kind) {
  std::vector<Interval> out;
  for (const Interval& iv : run.result.intervals) {
    if (iv.rank == rank && run.exec.schedule.ranks[rank][iv.action].kind == kind) out.push_back(iv);
  }
  return out;
}

TEST(PlanSimulation, DisaggregatedUnitsEqualTheSamePipelineInOneUnit) {
  // Shape 2 with one replica per unit is the Megatron shape with pp 2 whose
  // stages are the two units: same compute order, same costs, same time.
  test::Fixture f;
  Plan one = test::MegatronShape(f, 1, 2, 4);
  one.units[0].pipelines[0].stages[0].layers = {{"vision", 0, 64}, {"projector", 0, 1}};
  one.units[0].pipelines[0].stages[1].layers = {{"llm", 0, 34}};
  Plan two = EmptyPlan(f.ctx(), "two", 4);
  two.units.push_back(MakeUnit(f.ctx(), "encoder", {"vision", "projector"}, 0, 4, 0, 1, 1, 4, ScheduleKind::kOneFOneB,
                               Recompute::kFull, Balance::kParams));
  two.units.push_back(
      MakeUnit(f.ctx(), "llm", {"llm"}, 1, 4, 0, 1, 1, 4, ScheduleKind::kOneFOneB, Recompute::kFull, Balance::kParams));
  two.global_batch = one.global_batch;
  PlanRun a = RunPlan(f.model, f.cluster, f.workload, one, f.batch);
  PlanRun b = RunPlan(f.model, f.cluster, f.workload, two, f.batch);
  EXPECT_TRUE(a.exec.replicated);
  EXPECT_FALSE(b.exec.replicated);
  EXPECT_EQ(ComputeOrder(a.exec.schedule), ComputeOrder(b.exec.schedule));
  EXPECT_DOUBLE_EQ(a.metrics.iteration_time_s, b.metrics.iteration_time_s);
  EXPECT_NEAR(a.costs.model_flops, b.costs.model_flops, 1e-9 * a.costs.model_flops);
  EXPECT_NEAR(a.metrics.peak_mem_bytes, b.metrics.peak_mem_bytes, 1.0);
}

TEST(PlanSimulation, BrokersJoinEveryReplicaPairThatSharesSamples) {
  test::Fixture f;
  Plan p = test::DisaggregatedShape(f);
  p.units[1].pipelines[0].replicas = 1;  // llm dp 1 reads both encoder replicas
  PlanRun run = RunPlan(f.model, f.cluster, f.workload, p, f.batch);
  int cross = 0;
  for (const auto& e : run.exec.schedule.edges) cross += run.exec.stages[e.from].unit != run.exec.stages[e.to].unit;
  EXPECT_EQ(cross, 2);
  // The llm's first forward waits for both encoder replicas' first forwards.
  const double llm_f0 = ComputeIntervals(run, 2, ActionKind::kForward).front().start_s;
  for (int enc = 0; enc < 2; ++enc) {
    EXPECT_GE(llm_f0, ComputeIntervals(run, enc, ActionKind::kForward).front().end_s);
  }
}

// MMScale §6: units of different DP degrees trade activations through
// gcd(Du, Dv) brokers that concentrate and scatter them, so each replica's
// output crosses the boundary once. The replica pairs Loom joins fall into
// exactly gcd(Du, Dv) groups (the plan's broker count), and the sends of one
// producer microbatch to all its consumers (and the gradients back) add up to
// one output, not one per consumer (issue: the broker count was a label only).
TEST(PlanSimulation, BrokersScatterEachOutputOnceInGcdGroups) {
  test::Fixture f;
  f.cluster = MakeCluster("h800", 4, 8);  // 8 groups of 4 GPUs
  for (const auto& [up, down] : {std::pair{1, 2}, std::pair{2, 4}, std::pair{2, 3}, std::pair{4, 2}}) {
    const int du = up, dv = down;
    SCOPED_TRACE(::testing::Message() << "encoder dp " << du << ", llm dp " << dv);
    Plan p = EmptyPlan(f.ctx(), "mmscale-like", 4);
    p.units.push_back(MakeUnit(f.ctx(), "encoder", {"vision", "projector"}, 0, 4, 0, du, 1, 4, ScheduleKind::kOneFOneB,
                               Recompute::kFull, Balance::kParams));
    p.units.push_back(MakeUnit(f.ctx(), "llm", {"llm"}, du, 4, 0, dv, 1, 4, ScheduleKind::kOneFOneB, Recompute::kFull,
                               Balance::kParams));
    p.brokers.push_back({"encoder", "llm", std::gcd(du, dv)});
    const PlanRun run = RunPlan(f.model, f.cluster, f.workload, p, f.batch);
    const auto& sch = run.exec.schedule;
    // Replica pairs joined across the units, grouped (union-find over the
    // encoder's replicas 0..du-1 and the llm's du..du+dv-1).
    std::vector<int> parent(du + dv);
    std::iota(parent.begin(), parent.end(), 0);
    std::function<int(int)> root = [&](int x) { return parent[x] == x ? x : parent[x] = root(parent[x]); };
    auto replica = [&](int stage) {
      const auto& r = run.exec.ranks[sch.stage_rank[stage]];
      return r.unit == 0 ? r.replica : du + r.replica;
    };
    for (const StageEdge& e : sch.edges) {
      if (run.exec.stages[e.from].unit == run.exec.stages[e.to].unit) continue;
      parent[root(replica(e.from))] = root(replica(e.to));
    }
    int groups = 0;
    for (int x = 0; x < du + dv; ++x) groups += root(x) == x;
    EXPECT_EQ(groups, p.brokers[0].count);
    // Per producer (stage, microbatch): seconds its output spends on the wire
    // across the boundary, each way, against one output's worth.
    const PipelineCosts& c = run.costs.replicas[0];
    std::map<std::pair<int, int>, double> act_s, grad_s;
    for (const Interval& iv : run.result.intervals) {
      const Action& a = sch.ranks[iv.rank][iv.action];
      if (a.kind != ActionKind::kSend || a.peer_stage < 0) continue;
      const bool act = a.payload == Payload::kActivation;
      const int producer = act ? a.stage : a.peer_stage, consumer = act ? a.peer_stage : a.stage;
      if (run.exec.stages[producer].unit == run.exec.stages[consumer].unit) continue;
      (act ? act_s : grad_s)[{producer, a.microbatch}] += iv.end_s - iv.start_s - c.p2p.latency_s;
    }
    ASSERT_FALSE(act_s.empty());
    EXPECT_EQ(act_s.size(), grad_s.size());
    for (const auto* wire : {&act_s, &grad_s}) {
      for (const auto& [key, seconds] : *wire) {
        const double once = c.at(key.first, key.second).send_bytes / c.p2p.bytes_per_s;
        EXPECT_NEAR(seconds, once, 1e-9 * once) << "stage " << key.first << " microbatch " << key.second;
      }
    }
  }
}

TEST(PlanSimulation, SmFractionStretchesComputeAndPhasesTakeTurns) {
  test::Fixture f;
  PlanRun full = RunPlan(f.model, f.cluster, f.workload, test::TemporalShape(f, 1.0), f.batch);
  PlanRun half = RunPlan(f.model, f.cluster, f.workload, test::TemporalShape(f, 0.5), f.batch);
  auto fw = [](const PlanRun& r) {
    auto iv = ComputeIntervals(r, 0, ActionKind::kForward);
    return iv.front().end_s - iv.front().start_s;
  };
  EXPECT_NEAR(fw(half), 2 * fw(full), 1e-12);
  // Rank 0 is the encoder on group 0; the llm rank on group 0 starts its first
  // forward only after the encoder's last forward there, and the encoder's
  // first backward waits for the llm's last backward there.
  for (const PlanRun* r : {&full, &half}) {
    int llm_rank = -1;
    for (int i = 0; i < static_cast<int>(r->exec.ranks.size()); ++i) {
      if (r->exec.ranks[i].unit == 1 && r->exec.ranks[i].group == 0) llm_rank = i;
    }
    ASSERT_GE(llm_rank, 0);
    auto enc_f = ComputeIntervals(*r, 0, ActionKind::kForward);
    auto enc_b = ComputeIntervals(*r, 0, ActionKind::kBackward);
    auto llm_f = ComputeIntervals(*r, llm_rank, ActionKind::kForward);
    auto llm_b = ComputeIntervals(*r, llm_rank, ActionKind::kBackward);
    double enc_last_f = 0, llm_first_f = 1e30, llm_last_b = 0, enc_first_b = 1e30;
    for (auto& iv : enc_f) enc_last_f = std::max(enc_last_f, iv.end_s);
    for (auto& iv : llm_f) llm_first_f = std::min(llm_first_f, iv.start_s);
    for (auto& iv : llm_b) llm_last_b = std::max(llm_last_b, iv.end_s);
    for (auto& iv : enc_b) enc_first_b = std::min(enc_first_b, iv.start_s);
    EXPECT_GE(llm_first_f, enc_last_f);
    EXPECT_GE(enc_first_b, llm_last_b);
  }
  // Both units' memory is on group 0.
  EXPECT_NE(full.group_names[0].find("encoder"), std::string::npos);
  EXPECT_NE(full.group_names[0].find("llm"), std::string::npos);
}

// Ranks sharing a GPU group (here the encoder, phase 0, and the llm, phase 1,
// on group 0) step their optimizers after every compute action of the others
// there and one after another: the GPU does that work in turn, as the runtime
// does. Before, the llm's step overlapped the encoder's last backward and
// phases came out shorter than the same work on one stage.
TEST(PlanSimulation, OptimizerStepsOnASharedGpuFollowEveryPhaseAndEachOther) {
  test::Fixture f;
  const PlanRun run = RunPlan(f.model, f.cluster, f.workload, test::TemporalShape(f, 1.0), f.batch);
  std::vector<int> on_group0;
  for (int r = 0; r < static_cast<int>(run.exec.ranks.size()); ++r) {
    if (run.exec.ranks[r].group == 0) on_group0.push_back(r);
  }
  ASSERT_GE(on_group0.size(), 2u);
  std::vector<Interval> steps;
  double last_compute_s = 0;
  for (const Interval& iv : run.result.intervals) {
    if (std::find(on_group0.begin(), on_group0.end(), iv.rank) == on_group0.end()) continue;
    const Action& a = run.exec.schedule.ranks[iv.rank][iv.action];
    if (a.kind == ActionKind::kOptimizerStep) steps.push_back(iv);
    if (a.is_compute()) last_compute_s = std::max(last_compute_s, iv.end_s);
  }
  ASSERT_EQ(steps.size(), on_group0.size());
  std::sort(steps.begin(), steps.end(), [](const Interval& a, const Interval& b) { return a.start_s < b.start_s; });
  EXPECT_GE(steps.front().start_s, last_compute_s - 1e-12);
  for (size_t i = 1; i < steps.size(); ++i) EXPECT_GE(steps[i].start_s, steps[i - 1].end_s - 1e-12);
}

// Plan::phase_rounds: the encoder (phase 0, GPipe, 4 microbatches) and the
// llm (phase 1) take turns twice per iteration, each round on 2 microbatches,
// with the phase barriers per round; the encoder keeps 2 microbatches'
// activations instead of 4.
TEST(PlanSimulation, PhaseRoundsRepeatThePhasesOnEachRoundsMicrobatches) {
  test::Fixture f;
  const Plan once = test::TemporalShape(f, 1.0);
  Plan twice = once;
  twice.phase_rounds = 2;
  const PlanRun r1 = RunPlan(f.model, f.cluster, f.workload, once, f.batch);
  const PlanRun r2 = RunPlan(f.model, f.cluster, f.workload, twice, f.batch);
  // Rank 0: the encoder on group 0. GPipe per round: F0 F1 B0 B1 F2 F3 B2 B3.
  std::vector<std::pair<bool, int>> order;
  for (const Action& a : r2.exec.schedule.ranks[0]) {
    if (a.is_compute()) order.push_back({a.kind == ActionKind::kForward, a.microbatch});
  }
  const std::vector<std::pair<bool, int>> want{{true, 0}, {true, 1}, {false, 0}, {false, 1},
                                               {true, 2}, {true, 3}, {false, 2}, {false, 3}};
  EXPECT_EQ(order, want);
  int llm_rank = -1;
  for (int i = 0; i < static_cast<int>(r2.exec.ranks.size()); ++i) {
    if (r2.exec.ranks[i].unit == 1 && r2.exec.ranks[i].group == 0) llm_rank = i;
  }
  ASSERT_GE(llm_rank, 0);
  // Per round: the llm's forwards after the encoder's, the encoder's backwards after the llm's.
  auto span = [&](int rank, ActionKind kind, int round, bool last) {
    double t = last ? 0 : 1e30;
    for (const Interval& iv : r2.result.intervals) {
      const Action& a = r2.exec.schedule.ranks[iv.rank][iv.action];
      if (iv.rank != rank || a.kind != kind || a.microbatch / 2 != round) continue;
      t = last ? std::max(t, iv.end_s) : std::min(t, iv.start_s);
    }
    return t;
  };
  for (int round = 0; round < 2; ++round) {
    EXPECT_GE(span(llm_rank, ActionKind::kForward, round, false), span(0, ActionKind::kForward, round, true));
    EXPECT_GE(span(0, ActionKind::kBackward, round, false), span(llm_rank, ActionKind::kBackward, round, true));
  }
  // Round 1's encoder forwards wait for round 0's backwards (the rank's order).
  EXPECT_GE(span(0, ActionKind::kForward, 1, false), span(0, ActionKind::kBackward, 0, true));
  EXPECT_LT(r2.group_peak_mem_bytes[0], r1.group_peak_mem_bytes[0]);
  // Validation: rounds must divide the microbatches of a plan with several phases.
  twice.phase_rounds = 3;
  EXPECT_FALSE(PlanViolations(twice, f.model, f.cluster, f.workload).empty());
  Plan one_phase = test::MegatronShape(f);
  one_phase.phase_rounds = 2;
  const auto v = PlanViolations(one_phase, f.model, f.cluster, f.workload);
  ASSERT_FALSE(v.empty());
  EXPECT_NE(v.front().find("every unit is in one phase"), std::string::npos) << v.front();
}

TEST(PlanSimulation, HeterogeneousPipelinesSyncLayerWise) {
  test::Fixture f;
  PlanRun run = RunPlan(f.model, f.cluster, f.workload, test::HeterogeneousShape(f), f.batch);
  // Ranks: template 0 (pp 2) ranks 0-1, template 1 (pp 1) replicas on ranks 2 and 3.
  ASSERT_EQ(run.exec.schedule.num_ranks, 4);
  EXPECT_EQ(run.exec.samples, 16);
  double last_backward = 0;
  for (int r = 0; r < 4; ++r) {
    for (auto& iv : ComputeIntervals(run, r, ActionKind::kBackward)) last_backward = std::max(last_backward, iv.end_s);
  }
  // The pp-1 replicas hold every layer, so their sync waits for every pipeline's backward.
  for (const Interval& iv : run.result.intervals) {
    const Action& a = run.exec.schedule.ranks[iv.rank][iv.action];
    if (a.kind == ActionKind::kCollective && iv.rank >= 2) {
      EXPECT_GE(iv.start_s, last_backward - 1e-12);
    }
  }
  // Oobleck Fig. 2.9: two layer segments, each template-0 stage's layers,
  // summed over the stage's GPU group and both pp-1 replicas' (2 and 3).
  const ExecutionPlan& e = run.exec;
  std::vector<const CommGroup*> segments;
  for (const CommGroup& g : e.groups) {
    if (g.kind == GroupKind::kLayerSegment) segments.push_back(&g);
  }
  ASSERT_EQ(segments.size(), 2u);
  EXPECT_EQ(segments[0]->gpu_groups, (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(segments[1]->gpu_groups, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(segments[0]->layers, e.stages[0].layers);
  EXPECT_EQ(segments[1]->layers, e.stages[1].layers);
  EXPECT_EQ(e.stages[0].segment_groups, std::vector<int>{segments[0]->id});
  EXPECT_EQ(e.stages[2].segment_groups, (std::vector<int>{segments[0]->id, segments[1]->id}));
  // Priced per segment, and what the simulator runs: a whole-model replica's
  // sync is its two segments' (the template-0 stages' own), and rank 0's
  // collectives take its stage's share.
  const double first = SegmentSyncTime_s(f.model, e, e.stages[0], f.cluster);
  const double second = SegmentSyncTime_s(f.model, e, e.stages[1], f.cluster);
  EXPECT_GT(first, 0);
  EXPECT_NEAR(SegmentSyncTime_s(f.model, e, e.stages[2], f.cluster), first + second, 1e-12 * (first + second));
  double collectives_s = 0;
  for (const Interval& iv : run.result.intervals) {
    if (iv.rank == 0 && e.schedule.ranks[0][iv.action].kind == ActionKind::kCollective)
      collectives_s += iv.end_s - iv.start_s;
  }
  EXPECT_NEAR(collectives_s, first, 1e-9);
}

TEST(PlanSimulation, SubMicrobatchesAndDeferral) {
  test::Fixture f;
  Plan p = test::DisaggregatedShape(f);
  PlanRun base = RunPlan(f.model, f.cluster, f.workload, p, f.batch);
  IterationSchedule it;
  for (int k = 0; k < 4; ++k) it.microbatch_samples.push_back({4 * k, 4 * k + 1, 4 * k + 2, 4 * k + 3});
  it.sub_microbatches["encoder"] = {2, 2, 1, 2};
  PlanRun sub = RunPlan(f.model, f.cluster, f.workload, p, f.batch, &it);
  EXPECT_EQ(sub.exec.schedule.microbatches_of(0), 7);  // encoder stages run 2 + 2 + 1 + 2
  EXPECT_EQ(sub.exec.schedule.microbatches_of(2), 4);  // llm stages run 4
  EXPECT_NO_THROW(ValidateSchedule(sub.exec.schedule));
  EXPECT_NEAR(sub.costs.model_flops, base.costs.model_flops, 1e-9 * base.costs.model_flops);  // same samples
  // Deferring two samples of the last microbatch: less work, fewer samples.
  it.microbatch_samples[3] = {12, 13};
  it.deferred = {14, 15};
  PlanRun deferred = RunPlan(f.model, f.cluster, f.workload, p, f.batch, &it);
  EXPECT_EQ(deferred.exec.samples, 14);
  EXPECT_LT(deferred.costs.model_flops, base.costs.model_flops);
  // A sample placed twice is rejected.
  it.deferred = {14, 13};
  test::ExpectError([&] { RunPlan(f.model, f.cluster, f.workload, p, f.batch, &it); }, {"sample 13 is placed 2 times"});
}

TEST(PlanSimulation, MemoryOverflowNamesTheGroup) {
  test::Fixture f;
  Plan p = test::MegatronShape(f, 4, 1, 1);  // the whole batch in one microbatch, no pipeline
  p.units[0].recompute = Recompute::kNone;
  PlanRun run = RunPlan(f.model, f.cluster, f.workload, p, f.batch);
  ASSERT_FALSE(run.memory_violations.empty());
  EXPECT_NE(run.memory_violations[0].find("GPU group 0 (GPUs 0..3"), std::string::npos) << run.memory_violations[0];
  test::ExpectError([&] { CheckFits(run, "plan.json"); },
                    {"plan.json: does not fit in memory", "over the 78.0 GiB usable on an h800",
                     "its 80.0 GiB less 2.0 GiB of headroom"});
}

// A plan that fits the GPU's whole memory but not what is left after the
// CUDA context and communication buffers is refused; the headroom is the
// cluster's to set (issue 20: a fit at exactly 80.0 GiB).
TEST(PlanSimulation, PeakMemoryIsCheckedAgainstTheMemoryLessTheHeadroom) {
  test::Fixture f;
  EXPECT_DOUBLE_EQ(f.cluster.mem_headroom_bytes, 2.0 * (1 << 30));  // 2.5% of an H800's 80 GiB
  Plan p = test::MegatronShape(f, 2, 1, 1);
  const double peak = RunPlan(f.model, f.cluster, f.workload, p, f.batch).metrics.peak_mem_bytes;
  Cluster c = f.cluster;
  c.gpu.mem_bytes = static_cast<int64_t>(peak) + (1 << 30);  // the whole memory holds it with 1 GiB to spare
  c.mem_headroom_bytes = 2.0 * (1 << 30);
  EXPECT_FALSE(RunPlan(f.model, c, f.workload, p, f.batch).memory_violations.empty());
  c.mem_headroom_bytes = 0.5 * (1 << 30);
  EXPECT_TRUE(RunPlan(f.model, c, f.workload, p, f.batch).memory_violations.empty());
}

// Every module sees every trained sample exactly once per data-parallel copy
// of the batch: at the stages holding its first layer, over all replicas, the
// pieces are each (non-deferred) sample once, or each of its items once when
// split item by item. Counted independently of how the compiler cut them.
void ExpectEverySampleOnce(const Model& model, const Batch& batch, const ExecutionPlan& e,
                           const std::vector<int>& deferred = {}) {
  for (size_t mi = 0; mi < model.modules.size(); ++mi) {
    std::map<std::pair<int, int>, int> seen;
    int stages = 0;
    for (size_t r = 0; r < e.replicas.size(); ++r) {
      for (size_t s = 0; s < e.stages.size(); ++s) {
        for (const auto& range : e.stages[s].layers) {
          if (range.module != model.modules[mi].name || range.begin != 0) continue;
          ++stages;
          for (const auto& mb : e.replicas[r][s]) {
            for (const auto& p : mb.pieces) ++seen[{p.sample, p.item}];
          }
        }
      }
    }
    if (stages == 0) continue;
    for (int x = 0; x < static_cast<int>(batch.samples.size()); ++x) {
      const bool is_deferred = std::find(deferred.begin(), deferred.end(), x) != deferred.end();
      const int whole = seen.count({x, -1}) ? seen[{x, -1}] : 0;
      int items = 0;
      for (int i = 0; i < NumItems(batch.samples[x]); ++i) items += seen.count({x, i}) ? seen[{x, i}] : 0;
      if (is_deferred) {
        EXPECT_EQ(whole + items, 0) << model.modules[mi].name << " sample " << x;
      } else if (items > 0) {
        EXPECT_EQ(whole, 0) << model.modules[mi].name << " sample " << x;
        EXPECT_EQ(items, NumItems(batch.samples[x])) << model.modules[mi].name << " sample " << x;
      } else {
        // One copy per replica of the unit holding the module's first stage (a
        // flattened plan lists every replica's stages; a replicated one lists
        // each replica once).
        EXPECT_EQ(whole, 1) << model.modules[mi].name << " sample " << x;
      }
    }
  }
}

TEST(ExecutionPlan, EveryShapeCarriesEverySampleOnceAndNamesItsGroups) {
  test::Fixture f;
  const std::vector<std::pair<std::string, Plan>> shapes = {{"megatron", test::MegatronShape(f)},
                                                            {"disaggregated", test::DisaggregatedShape(f)},
                                                            {"temporal", test::TemporalShape(f, 0.5)},
                                                            {"heterogeneous", test::HeterogeneousShape(f)}};
  for (const auto& [name, plan] : shapes) {
    SCOPED_TRACE(name);
    const ExecutionPlan e = CompilePlan(f.model, f.cluster, f.workload, plan, f.batch);
    EXPECT_NO_THROW(ValidateExecution(e));
    EXPECT_EQ(e.replicated, name == "megatron");
    ExpectEverySampleOnce(f.model, f.batch, e);
    // Every stage's data-parallel group holds as many GPU groups as its unit has
    // replicas, and the stage's own group is a member.
    for (size_t s = 0; s < e.stages.size(); ++s) {
      const CommGroup& g = e.groups[e.stages[s].dp_group];
      EXPECT_EQ(g.kind, GroupKind::kDataParallel);
      const int own = e.ranks[e.schedule.stage_rank[s]].group;
      EXPECT_TRUE(std::find(g.gpu_groups.begin(), g.gpu_groups.end(), own) != g.gpu_groups.end());
      if (name != "heterogeneous") EXPECT_EQ(static_cast<int>(g.gpu_groups.size()), e.stages[s].dp);
    }
    // Every rank ends with its stages' gradient buckets (over the stage's
    // group), then a wait and the optimizer step.
    for (int r = 0; r < e.schedule.num_ranks; ++r) {
      const auto& acts = e.schedule.ranks[r];
      ASSERT_GE(acts.size(), 2u);
      EXPECT_EQ(acts.back().kind, ActionKind::kOptimizerStep);
      EXPECT_EQ(acts[acts.size() - 2].kind, ActionKind::kWait);
      int buckets = 0, stages = 0;
      for (const Action& a : acts) {
        if (a.kind != ActionKind::kCollective) continue;
        ++buckets;
        EXPECT_EQ(a.group, e.stages[a.stage].dp_group);
      }
      for (int v = 0; v < e.schedule.num_stages(); ++v) stages += e.schedule.stage_rank[v] == r;
      EXPECT_EQ(buckets, stages * kGradientBuckets);
    }
    // Compiling is deterministic: the same inputs give the same object.
    EXPECT_TRUE(e == CompilePlan(f.model, f.cluster, f.workload, plan, f.batch));
  }
}

TEST(ExecutionPlan, DeferredSamplesAndSubMicrobatchesAreInTheContents) {
  test::Fixture f;
  Plan p = test::DisaggregatedShape(f);
  IterationSchedule it;
  for (int k = 0; k < 4; ++k) it.microbatch_samples.push_back({4 * k, 4 * k + 1, 4 * k + 2, 4 * k + 3});
  it.microbatch_samples[3] = {12, 13};
  it.deferred = {14, 15};
  it.sub_microbatches["encoder"] = {2, 2, 1, 1};
  const ExecutionPlan e = CompilePlan(f.model, f.cluster, f.workload, p, f.batch, &it);
  ExpectEverySampleOnce(f.model, f.batch, e, it.deferred);
  EXPECT_EQ(e.samples, 14);
}

TEST(ExecutionPlan, PricingSumsItsLayersOnce) {
  // A one-stage plan on one GPU: the stage's forward time is the sum of every
  // layer's PriceLayer forward on the microbatch's tokens, computed here by hand.
  test::Fixture f;
  Cluster one = MakeCluster("h800", 1, 1);
  Workload w = f.workload;
  w.global_batch = 2;
  const Batch batch = DrawBatch(w, 0);
  StrategyContext ctx{f.model, one, w, batch, {}};
  const Plan plan =
      SingleUnitPlan(ctx, "megatron", 1, 1, 1, 1, 1, ScheduleKind::kOneFOneB, Recompute::kNone, Balance::kParams, 1);
  const ExecutionPlan e = CompilePlan(f.model, one, w, plan, batch);
  const ExecutionCosts costs = PriceExecution(e, f.model, one, batch);
  const auto tokens = CountModuleTokens(f.model, batch.samples);
  const auto needs = ComputeBackwardNeeds(f.model);
  double forward_s = 0;
  for (size_t mi = 0; mi < f.model.modules.size(); ++mi) {
    for (size_t li = 0; li < f.model.modules[mi].layers.size(); ++li) {
      forward_s += PriceLayer(f.model.modules[mi].layers[li], tokens[mi], needs[mi][li], one, {}).forward_s;
    }
  }
  ASSERT_EQ(costs.replicas.size(), 1u);
  EXPECT_NEAR(costs.replicas[0].stage[0][0].forward_s, forward_s, 1e-12 * forward_s);
}

// A 4-layer LLM with a vocabulary of 1000, its head tied to its embedding or not.
Model SmallLlm(bool tied) {
  return ParseModel(fmt::format(R"(model: tied
modules:
  - name: llm
    role: backbone
    modality: text
    tokens: {{source: text}}
    layers:
      - {{kind: embedding, vocab: 1000, hidden: 64}}
      - {{kind: transformer, count: 4, hidden: 64, ffn_hidden: 128, heads: 4}}
      - {{kind: lm_head, vocab: 1000, hidden: 64, tied: {}}}
)",
                                tied),
                    "tied.yaml");
}

// The `text` workload drawn as `samples` samples of `tokens` tokens.
Workload SmallText(int samples, int tokens) {
  Workload w = LoadWorkload("text");
  w.global_batch = samples;
  w.source.seq_len = tokens;
  return w;
}

// A tied LM head shares the embedding's matrix: counted once where both sit
// on one stage; on a stage without the embedding the head holds a copy with
// its gradient and AdamW state (Megatron's shared embedding on the last
// stage, the runtime's tied copy), V h parameters more, by hand.
TEST(ExecutionPlan, ATiedHeadOnAnotherStageHoldsItsCopyOfTheEmbedding) {
  const Model model = SmallLlm(/*tied=*/true);
  Cluster cluster = MakeCluster("h100", 1, 2);
  const Workload w = SmallText(4, 32);
  const Batch batch = DrawBatch(w, 0);
  const StrategyContext ctx{model, cluster, w, batch, {}};
  const Module& m = model.modules[0];
  for (int pp : {1, 2}) {
    const Plan plan = SingleUnitPlan(ctx, "megatron", 1, pp, 2 / pp, 1, 2, ScheduleKind::kOneFOneB, Recompute::kNone,
                                     Balance::kParams, 1);
    const ExecutionPlan exec = CompilePlan(model, cluster, w, plan, batch);
    const ExecutionCosts costs = PriceExecution(exec, model, cluster, batch);
    for (int s = 0; s < exec.schedule.num_stages(); ++s) {
      const ExecStage& st = exec.stages[s];
      double params = 0;
      bool embedding = false, head = false;
      for (const auto& r : st.layers) {
        for (int li = r.begin; li < r.end; ++li) {
          params += static_cast<double>(LayerParams(m.layers[li]));
          embedding = embedding || m.layers[li].kind == LayerKind::kEmbedding;
          head = head || m.layers[li].kind == LayerKind::kLmHead;
        }
      }
      if (head && !embedding) params += 1000.0 * 64;
      const double want = ModelState(params, 0, st.dp, st.zero_stage, w.precision).total();
      EXPECT_DOUBLE_EQ(costs.replicas[0].static_bytes[exec.schedule.stage_rank[s]], want) << pp << " stage " << s;
      if (pp == 2 && s == 1) EXPECT_TRUE(head && !embedding);
    }
  }
}

// A stage holding one tied copy (the embedding without the head, or the
// head without it) runs ZeRO-1 at most: its gradient is summed whole with
// the other copy's at the step, which ZeRO-2 and 3 would have dropped (the
// runtime shards such a stage so, runtime/zero_shards.h). A stage holding
// both, or an untied model's stages, keep the plan's ZeRO stage. ZeRO-2 holds
// its whole gradients from the first backward to the sync: the window's
// bytes are the fp32 gradients less the stage's slice, 4 B x params x (1 - 1/D).
TEST(ExecutionPlan, ATiedCopysStageRunsZeroOneAtMostAndZeroTwoHoldsItsGradientsInTheBackward) {
  Cluster cluster = MakeCluster("h100", 1, 4);
  const Workload w = SmallText(8, 32);
  const Batch batch = DrawBatch(w, 0);
  for (const bool tied : {true, false}) {
    const Model model = SmallLlm(tied);
    const StrategyContext ctx{model, cluster, w, batch, {}};
    for (int zero : {2, 3}) {
      for (int pp : {1, 2}) {
        const Plan plan = SingleUnitPlan(ctx, "megatron", 1, pp, 4 / pp, 1, 2, ScheduleKind::kOneFOneB,
                                         Recompute::kNone, Balance::kParams, zero);
        const ExecutionPlan exec = CompilePlan(model, cluster, w, plan, batch);
        const ExecutionCosts costs = PriceExecution(exec, model, cluster, batch);
        for (int s = 0; s < exec.schedule.num_stages(); ++s) {
          SCOPED_TRACE(fmt::format("tied {} zero {} pp {} stage {}", tied, zero, pp, s));
          const ExecStage& st = exec.stages[s];
          EXPECT_EQ(st.zero_stage, tied && pp == 2 ? 1 : zero);
          const auto& window = costs.replicas[0].backward_grad_bytes;
          const double want = st.zero_stage == 2 ? 4 * StageParamsOf(model, st).trainable * (1 - 1.0 / st.dp) : 0;
          EXPECT_DOUBLE_EQ(window.empty() ? 0 : window[s], want);
          if (st.zero_stage == 2) EXPECT_GT(want, 0);
        }
      }
    }
  }
}

// A split backward runs the stage's layers last to first: each holds its
// transient bytes while it runs, then its hold for W in place of its kept
// bytes. Worked by hand: layers (kept, hold, transient) in forward order.
TEST(ExecutionPlan, ASplitBackwardsHoldsBuildUpLayerByLayer) {
  auto layer = [](double kept, double hold, double transient) {
    LayerTimes t;
    t.activation_bytes = kept;
    t.weight_grad_hold_bytes = hold;
    t.transient_bytes = transient;
    return t;
  };
  // Full recomputation's shape: a layer input kept, a whole layer held.
  // Last: 0.5 while it runs, then +1; middle: 1 + 0.5, then +2; first: 2 + 0.5.
  EXPECT_DOUBLE_EQ(SplitBackwardTransientBytes({layer(1, 2, 0.5), layer(1, 2, 0.5), layer(1, 2, 0.5)}), 2.5);
  // Holds below the kept bytes: the first layer run (the last) is the peak.
  EXPECT_DOUBLE_EQ(SplitBackwardTransientBytes({layer(4, 1, 0.5), layer(4, 1, 3)}), 3);
  EXPECT_DOUBLE_EQ(SplitBackwardTransientBytes({}), 0);
}

// A whole backward runs the stage's layers last to first, each holding its
// transient bytes while it runs and freeing its kept bytes once done: a
// bottom layer's working set comes when the layers above have freed theirs.
// Worked by hand: layers (kept, transient) in forward order.
TEST(ExecutionPlan, AWholeBackwardFreesTheLayersAboveBeforeTheOneBelowRuns) {
  auto layer = [](double kept, double transient) {
    LayerTimes t;
    t.activation_bytes = kept;
    t.transient_bytes = transient;
    return t;
  };
  // Top: 1 while it runs, then -5; bottom: -5 + 10. The largest working set alone said 10.
  EXPECT_DOUBLE_EQ(BackwardTransientBytes({layer(1, 10), layer(5, 1)}), 5);
  // Every layer's working set below what the layers above freed: the top's.
  EXPECT_DOUBLE_EQ(BackwardTransientBytes({layer(4, 3), layer(2, 1), layer(1, 0.5)}), 0.5);
  // Nothing freed above (kept 0): the largest.
  EXPECT_DOUBLE_EQ(BackwardTransientBytes({layer(0, 2), layer(0, 7), layer(0, 3)}), 7);
  EXPECT_DOUBLE_EQ(BackwardTransientBytes({}), 0);
}

// Under ZeRO-3 an embedding whose tied head runs on its stage stays gathered
// through the backward (runtime/fsdp_layers.h): its unit, V h x (2 B of bf16
// weights + 4 B of fp32 gradient), is added to the whole backward and taken
// out of the embedding's own entry. Not at ZeRO-1, not with the head on
// another stage, not untied, not without a second replica.
TEST(ExecutionPlan, AZero3EmbeddingTiedToItsStagesHeadStaysGatheredThroughTheBackward) {
  const double unit = (2.0 + 4.0) * 1000 * 64;
  ExecStage whole;
  whole.layers = {{"llm", 0, 6}};
  whole.dp = 2;
  whole.zero_stage = 3;
  std::vector<LayerTimes> priced(6);
  priced[0].transient_bytes = unit + 10;  // the unit PriceLayer added, and 10 B of its own
  EXPECT_DOUBLE_EQ(PinnedEmbeddingBytes(SmallLlm(true), whole, Precision::kBf16, &priced), unit);
  EXPECT_DOUBLE_EQ(priced[0].transient_bytes, 10);
  auto none = [&](const ExecStage& st, bool tied, const char* what) {
    std::vector<LayerTimes> untouched(6);
    untouched[0].transient_bytes = unit;
    EXPECT_EQ(PinnedEmbeddingBytes(SmallLlm(tied), st, Precision::kBf16, &untouched), 0) << what;
    EXPECT_EQ(untouched[0].transient_bytes, unit) << what;
  };
  none(whole, false, "untied");
  ExecStage st = whole;
  st.zero_stage = 1;
  none(st, true, "zero-1");
  st = whole;
  st.layers = {{"llm", 0, 5}};  // the head on the next stage
  none(st, true, "head elsewhere");
  st = whole;
  st.dp = 1;
  none(st, true, "one replica");
}

// The same through PriceExecution: a tied LLM on one ZeRO-3 stage of 2
// replicas, 8-token samples (every other working set far below the unit): both
// backwards, whole and split, hold the unit once (unit <= extra < 1.75 units,
// the head's logits the rest; counted again at the embedding's turn it is
// about 1.9 units, and the split backward lost it).
TEST(ExecutionPlan, BothBackwardsOfAZero3StageHoldItsPinnedEmbeddingOnce) {
  const Model model = SmallLlm(/*tied=*/true);
  Cluster cluster = MakeCluster("h100", 1, 2);
  Workload w = SmallText(2, 8);
  w.precision = Precision::kBf16;
  const Batch batch = DrawBatch(w, 0);
  const StrategyContext ctx{model, cluster, w, batch, {}};
  const Plan plan =
      SingleUnitPlan(ctx, "megatron", 1, 1, 2, 1, 1, ScheduleKind::kOneFOneB, Recompute::kNone, Balance::kParams, 3);
  const ExecutionPlan exec = CompilePlan(model, cluster, w, plan, batch);
  ASSERT_EQ(exec.stages[0].zero_stage, 3);
  const ExecutionCosts costs = PriceExecution(exec, model, cluster, batch);
  const StageCost& sc = costs.replicas[0].stage[0][0];
  const double unit = (2.0 + 4.0) * 1000 * 64;
  EXPECT_GE(sc.transient_bytes, unit);
  EXPECT_LT(sc.transient_bytes, 1.75 * unit);
  EXPECT_GE(sc.split_backward_transient_bytes, unit);
  EXPECT_LT(sc.split_backward_transient_bytes, 1.75 * unit);
}

// ZeRO-3 all-gathers each layer's weights before its forward (and again,
// with the reduce-scatter, in its backward); when the gather is slower than
// the layer's compute the SMs wait, and that wait is idle time in the bubble,
// not busy time (issue 20: FSDP showed "bubble 0.0%" at low MFU). Here, 16
// GPUs over two nodes: the waits are max(0, gather - compute) per layer, by
// hand, and with one stage and no gradient all-reduce they are all the idle.
TEST(ExecutionPlan, ZeroThreeGathersSlowerThanComputeAreIdleTime) {
  test::Fixture f;
  const Cluster c = MakeCluster("h800", 2, 8);
  Workload w = f.workload;
  w.global_batch = 16;
  Batch batch = DrawBatch(w, 0);
  batch.samples.assign(16, batch.samples[0]);  // every replica the same work: no idle but the waits
  StrategyContext ctx{f.model, c, w, batch, {}};
  const Plan plan =
      SingleUnitPlan(ctx, "fsdp", 1, 1, 16, 1, 1, ScheduleKind::kOneFOneB, Recompute::kNone, Balance::kParams, 3);
  const ExecutionPlan e = CompilePlan(f.model, c, w, plan, batch);
  const ExecutionCosts costs = PriceExecution(e, f.model, c, batch);
  const auto needs = ComputeBackwardNeeds(f.model);
  double forward_wait_s = 0, backward_wait_s = 0;
  const StageCost& sc = costs.replicas[0].stage[0][0];
  {
    const auto tokens = CountModuleTokens(f.model, std::vector<Sample>(1, batch.samples[0]));
    for (size_t mi = 0; mi < f.model.modules.size(); ++mi) {
      for (size_t li = 0; li < f.model.modules[mi].layers.size(); ++li) {
        const Layer& l = f.model.modules[mi].layers[li];
        const LayerTimes plain = PriceLayer(l, tokens[mi], needs[mi][li], c, {});
        const double gather_s = GroupAllGatherTime_s(2.0 * static_cast<double>(LayerParams(l)), 16, 1, c);
        forward_wait_s += std::max(0.0, gather_s - plain.forward_s);
        if (needs[mi][li].weight) backward_wait_s += std::max(0.0, 2 * gather_s - plain.backward_weight_s);
      }
    }
  }
  ASSERT_GT(forward_wait_s, 0);
  EXPECT_NEAR(sc.forward_wait_s, forward_wait_s, 1e-9 * forward_wait_s);
  EXPECT_NEAR(sc.backward_wait_s, backward_wait_s, 1e-9 * backward_wait_s);
  const PlanRun run = RunPlan(f.model, c, w, plan, batch);
  EXPECT_NEAR(run.metrics.bubble_ratio * run.metrics.iteration_time_s, forward_wait_s + backward_wait_s,
              0.02 * (forward_wait_s + backward_wait_s));
}

TEST(ExecutionPlan, CustomScheduleNeedsItsRankOrders) {
  test::Fixture f;
  Plan p = test::MegatronShape(f);
  p.units[0].pipelines[0].schedule = ScheduleKind::kCustom;
  test::ExpectError([&] { CompilePlan(f.model, f.cluster, f.workload, p, f.batch); },
                    {"custom schedule", "rank_orders"});
}

// The custom schedule takes any stage-to-rank mapping: a V shape (stages 0
// and 3 on rank 0, 1 and 2 on rank 1) with each batch's per-rank orders, and
// a stage may run its own tensor-parallel degree inside its group.
TEST(ExecutionPlan, VShapeWithPerStageTensorParallelism) {
  test::Fixture f;
  Plan p = EmptyPlan(f.ctx(), "v-shape", 8);
  std::vector<std::string> modules;
  for (const auto& m : f.model.modules) modules.push_back(m.name);
  Unit u =
      MakeUnit(f.ctx(), "all", modules, 0, 4, 0, 1, 4, 2, ScheduleKind::kCustom, Recompute::kFull, Balance::kParams);
  u.pipelines[0].pp = 2;
  const int ranks[] = {0, 1, 1, 0};
  for (int s = 0; s < 4; ++s) u.pipelines[0].stages[s].rank = ranks[s];
  u.pipelines[0].stages[2].tp = 8;
  p.units.push_back(u);
  p.global_batch = 16;
  IterationSchedule it;
  it.microbatch_samples = {{0, 1, 2, 3, 4, 5, 6, 7}, {8, 9, 10, 11, 12, 13, 14, 15}};
  auto steps = [](const char* text) {
    std::vector<StageStep> out;
    for (const char* c = text; *c; c += 3) out.push_back({c[0] == 'F', c[1] - '0', c[2] - '0'});
    return out;
  };
  it.rank_orders = {steps("F00F01F30F31B30B31B00B01"), steps("F10F11F20F21B20B21B10B11")};
  const ExecutionPlan e = CompilePlan(f.model, f.cluster, f.workload, p, f.batch, &it);
  EXPECT_EQ(e.schedule.stage_rank, (std::vector<int>{0, 1, 1, 0}));
  EXPECT_EQ(e.stages[2].tp, 8);
  EXPECT_EQ(e.stages[2].seq_share, 1);
  EXPECT_EQ(e.stages[1].tp, 4);
  EXPECT_EQ(e.stages[1].seq_share, 2);
  ExpectEverySampleOnce(f.model, f.batch, e);
  const PlanRun run = RunPlan(f.model, f.cluster, f.workload, p, f.batch, &it);
  EXPECT_GT(run.metrics.iteration_time_s, 0);
  // The same V shape under a generated schedule is rejected, naming the rule.
  Plan generated = p;
  generated.units[0].pipelines[0].schedule = ScheduleKind::kGpipe;
  test::ExpectError([&] { CompilePlan(f.model, f.cluster, f.workload, generated, f.batch); },
                    {"stage 2 is on rank 1", "v % pp = 0", "custom"});
  // A stage TP that does not divide the group is rejected.
  p.units[0].pipelines[0].stages[2].tp = 3;
  test::ExpectError([&] { CompilePlan(f.model, f.cluster, f.workload, p, f.batch, &it); },
                    {"stage 2 has tp 3", "must divide the 8 GPUs of its rank"});
}

// Oobleck's templates give stages different GPU counts: a pipeline rank may
// span several GPU groups, and its stage runs on all of them (the extra GPUs
// share its sequences unless the stage's own TP uses them). With one GPU per
// group, a 1-GPU rank and a 3-GPU rank: the 3-GPU rank's stage sees a third of
// the tokens per GPU, and its memory counts on each of its three GPUs.
TEST(ExecutionPlan, RanksSpanSeveralGroupsForOobleckStages) {
  test::Fixture f;
  Cluster four = MakeCluster("h800", 1, 4);
  Workload w = f.workload;
  w.global_batch = 12;
  const Batch batch = DrawBatch(w, 0);
  StrategyContext ctx{f.model, four, w, batch, {}};
  Plan p = SingleUnitPlan(ctx, "oobleck-like", 1, 2, 1, 1, 4, ScheduleKind::kOneFOneB, Recompute::kFull,
                          Balance::kParams, 1);
  p.units[0].pipelines[0].rank_groups = {1, 3};
  const ExecutionPlan e = CompilePlan(f.model, four, w, p, batch);
  ASSERT_EQ(e.ranks.size(), 2u);
  EXPECT_EQ(e.ranks[0].group, 0);
  EXPECT_EQ(e.ranks[0].num_groups, 1);
  EXPECT_EQ(e.ranks[1].group, 1);
  EXPECT_EQ(e.ranks[1].num_groups, 3);
  EXPECT_EQ(e.stages[0].gpus, 1);
  EXPECT_EQ(e.stages[1].gpus, 3);
  EXPECT_EQ(e.stages[1].seq_share, 3);
  const PlanRun run = RunPlan(f.model, four, w, p, batch);
  ASSERT_EQ(run.groups.size(), 4u);  // every GPU has a memory curve
  EXPECT_EQ(run.group_peak_mem_bytes[1], run.group_peak_mem_bytes[3]);
  // A rank span list of the wrong length is rejected.
  p.units[0].pipelines[0].rank_groups = {4};
  test::ExpectError([&] { CompilePlan(f.model, four, w, p, batch); },
                    {"rank_groups has 1 entries", "one per pipeline rank (2)"});
}

// Entrain's regrouping: the llm unit trains the encoder's samples in
// microbatches of its own, so its broker edges are many to many. Checked
// against the contents, independently of the edges: every llm forward starts
// after the forward of every encoder microbatch that holds one of its samples,
// and every encoder backward after the backward of every llm microbatch its
// samples went to.
TEST(ExecutionPlan, UnitsRegroupSamplesOverManyToManyEdges) {
  test::Fixture f;
  const Plan p = test::DisaggregatedShape(f);  // encoder dp 2, llm dp 2, 4 microbatches of 4 samples
  IterationSchedule it;
  for (int k = 0; k < 4; ++k) it.microbatch_samples.push_back({4 * k, 4 * k + 1, 4 * k + 2, 4 * k + 3});
  it.unit_microbatch_samples["llm"] = {{0, 4, 1, 5}, {2, 6, 3, 7}, {8, 12, 9, 13}, {10, 14, 11, 15}};
  const ExecutionPlan e = CompilePlan(f.model, f.cluster, f.workload, p, f.batch, &it);
  ExpectEverySampleOnce(f.model, f.batch, e);
  bool many_to_many = false;
  for (const auto& edge : e.schedule.edges) many_to_many = many_to_many || !edge.producers.empty();
  EXPECT_TRUE(many_to_many);
  const PlanRun run = RunPlan(f.model, f.cluster, f.workload, p, f.batch, &it);
  // Interval of (stage, microbatch, forward?) from the simulated run.
  std::map<std::tuple<int, int, bool>, std::pair<double, double>> when;
  for (const Interval& iv : run.result.intervals) {
    const Action& a = run.exec.schedule.ranks[iv.rank][iv.action];
    if (a.is_compute()) when[{a.stage, a.microbatch, a.kind == ActionKind::kForward}] = {iv.start_s, iv.end_s};
  }
  const auto& c = e.replicas[0];
  int checked = 0;
  for (int to = 0; to < e.schedule.num_stages(); ++to) {
    if (e.stages[to].unit != 1 || e.stages[to].layers.front().begin != 0) continue;  // llm first stages
    for (int from = 0; from < e.schedule.num_stages(); ++from) {
      if (e.stages[from].unit != 0 || e.stages[from].layers.back().module != "projector") continue;
      for (size_t k = 0; k < c[to].size(); ++k) {
        for (size_t j = 0; j < c[from].size(); ++j) {
          bool shared = false;
          for (const auto& a : c[to][k].pieces) {
            for (const auto& b : c[from][j].pieces) shared = shared || a.sample == b.sample;
          }
          if (!shared) continue;
          const int kk = static_cast<int>(k), jj = static_cast<int>(j);
          EXPECT_GE(when.at({to, kk, true}).first, when.at({from, jj, true}).second - 1e-12);
          EXPECT_GE(when.at({from, jj, false}).first, when.at({to, kk, false}).second - 1e-12);
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 16);  // every llm microbatch (2 replicas x 4) takes from two encoder microbatches
  // A regrouping that loses a sample is rejected.
  it.unit_microbatch_samples["llm"][3] = {10, 14, 11};
  test::ExpectError([&] { CompilePlan(f.model, f.cluster, f.workload, p, f.batch, &it); },
                    {"unit_microbatch_samples.llm", "exactly once"});
}

}  // namespace
}  // namespace loom
