// Failure traces (seeded, read from files with errors naming the line) and
// the replay of Oobleck, Varuna and Bamboo over them: without failures every
// system runs at its healthy rate; a failure costs Oobleck at most the
// interrupted iteration plus detection and the state copy, Varuna at most a
// checkpoint period plus restart and load; the thesis' qualitative result
// at a 10-minute MTBF (Table 2.2: Oobleck keeps more throughput and loses
// less per failure than Varuna).
#include <gtest/gtest.h>

#include <cmath>

#include "loom/cost/module_summary.h"
#include "loom/data/sample_source.h"
#include "loom/error.h"
#include "loom/session/failure_replay.h"
#include "loom/session/failure_trace.h"
#include "loom/spec/cluster.h"
#include "loom/spec/zoo.h"
#include "loom/strategies/strategy.h"
#include "test_util.h"

namespace loom {
namespace {

TEST(FailureTrace, GeneratedTracesAreSeededAndStopAtMinNodes) {
  const FailureTrace a = GenerateFailureTrace(30, 600, 1e7, 5, 15);
  EXPECT_EQ(a.events.size(), 15u);  // stops at half
  const FailureTrace b = GenerateFailureTrace(30, 600, 1e7, 5, 15);
  EXPECT_EQ(a.events, b.events);
  EXPECT_NE(GenerateFailureTrace(30, 600, 1e7, 6, 15).events, a.events);
  for (size_t i = 1; i < a.events.size(); ++i) EXPECT_GT(a.events[i].time_s, a.events[i - 1].time_s);
  // Exponential gaps: the mean of many is the MTBF.
  const FailureTrace many = GenerateFailureTrace(5000, 100, 1e9, 1, 0);
  EXPECT_NEAR(many.events.back().time_s / many.events.size(), 100, 5);
  test::ExpectError([] { GenerateFailureTrace(4, 0, 10, 1, 2); }, {"mean time between failures 0 s"});
}

TEST(FailureTrace, FilesAreCheckedLineByLine) {
  const std::string ok = test::WriteTemp("trace-ok.txt", "# time event node\n10 fail 3\n\n20.5 join 3 # back\n");
  const FailureTrace t = ReadFailureTrace(ok, 4, 100);
  ASSERT_EQ(t.events.size(), 2u);
  EXPECT_EQ(t.events[1], (FailureEvent{20.5, NodeEvent::kJoin, 3}));
  const auto bad = [](const std::string& name, const std::string& text, std::vector<std::string> frags) {
    const std::string path = test::WriteTemp(name, text);
    test::ExpectError([&] { ReadFailureTrace(path, 4, 100); }, frags);
  };
  bad("trace-kind.txt", "10 crash 1\n", {"trace-kind.txt:1", "event 'crash'", "fail, join"});
  bad("trace-node.txt", "10 fail 1\n11 fail 7\n", {"trace-node.txt:2", "node '7'", "0..3"});
  // Audit A5-14: every time a finite number of seconds a plot can place, the
  // whole token read (an istream read "nan" as no number and "12s" as 12); a
  // node id past an int is named as one out of range.
  for (const std::string time : {"nan", "inf", "1e308", "-5", "12s"}) {
    bad("trace-time.txt", time + " fail 1\n",
        {"trace-time.txt:1: time '" + time + "'; valid: seconds from the start of training, 0 to 3.6e+08"});
  }
  bad("trace-big-node.txt", "10 fail 99999999999999999999\n", {":1: node '99999999999999999999'", "0..3"});
  EXPECT_EQ(ReadFailureTrace(test::WriteTemp("trace-zero.txt", "-0 fail 1\n"), 4, 100).events[0].time_s, 0);
  bad("trace-twice.txt", "10 fail 1\n11 fail 1\n", {":2", "node 1 has already failed"});
  bad("trace-order.txt", "10 fail 1\n5 fail 2\n", {":2", "before the previous event"});
  bad("trace-join.txt", "10 join 1\n", {":1", "node 1 has not failed"});
}

struct ReplaySetup {
  Model model = LoadModel("gpt3-medium");
  Cluster cluster = [] {
    Cluster c = LoadCluster("oobleck-testbed");
    c.nodes = 8;
    return c;
  }();
  Workload workload = DefaultWorkload(model);
};

// Varuna's samples/s over a failure-free hour on the setup's 8 nodes (its
// checkpoint writes included).
double VarunaHealthyRate(const ReplaySetup& s, const ReplayOptions& o) {
  FailureTrace none;
  none.nodes = 8;
  none.duration_s = 3600;
  return ReplayFailures(s.model, s.cluster, s.workload, none, {"varuna"}, o)[0].healthy_samples_per_s;
}

TEST(FailureReplay, FailuresCostWhatEachSystemLoses) {
  const ReplaySetup s;
  ReplayOptions o;
  o.fault_tolerance = 1;
  FailureTrace none;
  none.nodes = 8;
  none.duration_s = 3600;
  for (const auto& r : ReplayFailures(s.model, s.cluster, s.workload, none, {"oobleck", "varuna"}, o)) {
    EXPECT_NEAR(r.mean_samples_per_s, r.healthy_samples_per_s, 1e-9 * r.healthy_samples_per_s) << r.system;
    EXPECT_GT(r.healthy_samples_per_s, 0);
  }
  // Frequent failures (the thesis' 10 minutes) down to half the nodes.
  const FailureTrace trace = GenerateFailureTrace(8, 600, 4 * 3600, 3, 4);
  const auto rs = ReplayFailures(s.model, s.cluster, s.workload, trace, {"oobleck", "varuna"}, o);
  ASSERT_EQ(rs.size(), 2u);
  const SystemReplay& oob = rs[0];
  const SystemReplay& var = rs[1];
  EXPECT_TRUE(oob.stopped.empty()) << oob.stopped;
  ASSERT_EQ(oob.events.size(), 4u);
  double oob_lost = 0, var_lost = 0;
  for (const auto& e : oob.events) oob_lost += e.lost_s;
  for (const auto& e : var.events) var_lost += e.lost_s;
  // Oobleck loses at most one iteration per failure (plus detection and the copy).
  const double iteration_s = s.workload.global_batch / oob.healthy_samples_per_s;
  for (const auto& e : oob.events) EXPECT_LT(e.lost_s, 2 * iteration_s + 60) << e.what;
  for (const auto& e : var.events) EXPECT_GE(e.lost_s, o.restart_s);
  EXPECT_GT(var_lost, oob_lost);
  EXPECT_GT(oob.mean_samples_per_s, var.mean_samples_per_s);
  test::ExpectError([&] { ReplayFailures(s.model, s.cluster, s.workload, trace, {"checkfreq"}, o); },
                    {"unknown system 'checkfreq'", "oobleck, varuna, bamboo"});
}

// Measured constants (Oobleck's artifact: Varuna's restart with the load in it,
// its synchronous checkpoint, Oobleck's reconfiguration) replace the derived
// ones; a failure during a restart cuts that restart short, and no segment of
// the timeline runs backwards.
TEST(FailureReplay, MeasuredConstantsReplaceDerivedOnes) {
  const ReplaySetup s;
  ReplayOptions o;
  o.restart_s = 581;
  o.checkpoint_save_s = 120;
  o.checkpoint_load_s = 0;
  o.oobleck_recover_s = 10;
  FailureTrace trace;
  trace.nodes = 8;
  trace.duration_s = 4 * 3600;
  trace.events = {{600, NodeEvent::kFail, 1}, {900, NodeEvent::kFail, 5}, {3000, NodeEvent::kFail, 3}};
  const auto rs = ReplayFailures(s.model, s.cluster, s.workload, trace, {"oobleck", "varuna"}, o);
  ASSERT_EQ(rs.size(), 2u);
  const SystemReplay& oob = rs[0];
  const SystemReplay& var = rs[1];
  const double it = s.workload.global_batch / oob.healthy_samples_per_s;
  for (const auto& e : oob.events) {
    EXPECT_GE(e.lost_s, 10);
    EXPECT_LT(e.lost_s, 2 * it + 10);
  }
  ASSERT_EQ(var.events.size(), 3u);
  // The first restart (600 s + 581 s) is cut short by the failure at 900 s.
  EXPECT_LE(var.events[0].lost_s, 600 + 300 + 1e-6);
  bool cut = false;
  for (const auto& seg : var.timeline) cut |= seg.start_s == 600 && seg.samples_per_s == 0 && seg.end_s == 900;
  EXPECT_TRUE(cut);
  EXPECT_GE(var.events[1].lost_s, 581);
  for (const SystemReplay& r : rs) {
    for (const auto& seg : r.timeline) EXPECT_LE(seg.start_s, seg.end_s) << r.system;
  }
  // The checkpoint write is priced in the healthy rate: 10 iterations and 120 s.
  ReplayOptions free = o;
  free.checkpoint_save_s = 0;
  const double with = VarunaHealthyRate(s, o);
  const double without = VarunaHealthyRate(s, free);
  const double varuna_it = s.workload.global_batch / without;
  EXPECT_NEAR(with, 10 * s.workload.global_batch / (10 * varuna_it + 120), 1e-9 * with);
}

// Without measured times, a checkpoint writes what it holds, the weights and
// the optimizer state (14 B per parameter in bf16: Megatron-LM's distributed
// checkpoint), not the gradients, over the store's bandwidth.
TEST(FailureReplay, DerivedCheckpointWriteIsWeightsAndOptimizerState) {
  const ReplaySetup s;
  ASSERT_EQ(s.workload.precision, Precision::kBf16);
  ReplayOptions o;
  o.storage_bytes_per_s = 1e9;
  ReplayOptions free = o;
  free.checkpoint_save_s = 0;
  const double with = VarunaHealthyRate(s, o);
  const double without = VarunaHealthyRate(s, free);
  const double it = s.workload.global_batch / without;
  const double save_s = 14.0 * static_cast<double>(ModelParams(s.model)) / 1e9;
  EXPECT_NEAR(with, o.checkpoint_every * s.workload.global_batch / (o.checkpoint_every * it + save_s), 1e-9 * with);
  EXPECT_NEAR(ModelCheckpointBytes(s.model, Precision::kFp32), 12.0 * static_cast<double>(ModelParams(s.model)), 1);
}

// `--recompute full` (the thesis recomputes every layer): every system's plan
// recomputes fully, and the pinned plans are no faster than the searched ones,
// which could have chosen full recomputation themselves.
TEST(FailureReplay, PinnedRecomputationReachesEveryPlan) {
  const ReplaySetup s;
  const Batch batch = DrawBatch(s.workload, 0);
  StrategyContext ctx{s.model, s.cluster, s.workload, batch, {}};
  ctx.fixed_recompute = Recompute::kFull;
  for (const char* name : {"megatron", "oobleck"}) {
    const StrategyResult r = RunStrategy(name, ctx);
    for (const auto& u : r.plan.units) EXPECT_EQ(u.recompute, Recompute::kFull) << name;
  }
  FailureTrace none;
  none.nodes = 8;
  none.duration_s = 3600;
  ReplayOptions searched, pinned;
  pinned.recompute = Recompute::kFull;
  const auto a = ReplayFailures(s.model, s.cluster, s.workload, none, {"oobleck", "varuna"}, searched);
  const auto b = ReplayFailures(s.model, s.cluster, s.workload, none, {"oobleck", "varuna"}, pinned);
  for (int i = 0; i < 2; ++i) EXPECT_LE(b[i].healthy_samples_per_s, a[i].healthy_samples_per_s * (1 + 1e-9));
  // On 8 A40s gpt3-medium fits without recomputation, so pinning full costs.
  EXPECT_LT(b[1].healthy_samples_per_s, a[1].healthy_samples_per_s);
}

}  // namespace
}  // namespace loom
