// The simulator against closed forms, and incremental against full runs.
#include <gtest/gtest.h>

#include <random>

#include "loom/pipeline/schedules.h"
#include "loom/sim/simulator.h"
#include "test_util.h"

namespace loom {
namespace {

// Uniform stages: forward f, backward-data bd, backward-weight bw per stage,
// free communication unless `p2p_s` is given, no gradient sync.
PipelineCosts Uniform(const Schedule& s, double f, double bd, double bw, double act = 1, double p2p_s = 0) {
  PipelineCosts c;
  c.stage.assign(s.num_stages(), std::vector<StageCost>(s.num_microbatches));
  for (auto& st : c.stage) {
    for (auto& x : st) {
      x.forward_s = f;
      x.backward_data_s = bd;
      x.backward_weight_s = bw;
      x.activation_bytes = act;
      x.weight_grad_hold_bytes = act;  // a split backward's W needs what the forward kept
      x.send_bytes = p2p_s > 0 ? 1.0 : 0.0;
    }
  }
  c.static_bytes.assign(s.num_ranks, 0.0);
  c.grad_sync_s.assign(s.num_stages(), 0.0);
  c.p2p = {p2p_s > 0 ? 1.0 / p2p_s : 1.0, 0.0};
  return c;
}

TEST(Simulator, OneFOneBClosedForm) {
  for (int p : {1, 2, 4, 8}) {
    for (int m : {1, 4, 8, 13}) {
      Schedule s = MakeOneFOneB(p, m);
      SimResult r = Simulate(s, Uniform(s, 1.0, 1.5, 0.5));
      EXPECT_DOUBLE_EQ(r.iteration_time_s, (m + p - 1) * 3.0) << p << " " << m;
      EXPECT_NEAR(r.bubble_ratio, (p - 1.0) / (m + p - 1.0), 1e-12);
    }
  }
}

// The optimizer step follows each rank's gradient sync: 1F1B's (m + p - 1)(f + b)
// plus the slowest rank's step when sync is free; with a sync, rank 0 (the last
// to finish its backward) steps after its buckets.
TEST(Simulator, OptimizerStepEndsEachRank) {
  for (int p : {1, 4}) {
    Schedule s = MakeOneFOneB(p, 8);
    PipelineCosts c = Uniform(s, 1.0, 1.5, 0.5);
    c.optimizer_s.assign(p, 0.25);
    c.optimizer_s[0] = 0.75;
    EXPECT_DOUBLE_EQ(Simulate(s, c).iteration_time_s, (8 + p - 1) * 3.0 + 0.75) << p;
    c.grad_sync_s.assign(s.num_stages(), 2.0);
    SimOptions no_overlap;
    no_overlap.overlap_grad_sync = false;
    EXPECT_DOUBLE_EQ(Simulate(s, c, no_overlap).iteration_time_s, (8 + p - 1) * 3.0 + 2.0 + 0.75) << p;
    SimOptions off;
    off.optimizer_step = false;
    c.grad_sync_s.assign(s.num_stages(), 0.0);
    EXPECT_DOUBLE_EQ(Simulate(s, c, off).iteration_time_s, (8 + p - 1) * 3.0) << p;
  }
}

TEST(Simulator, GPipeClosedFormAndPeakActivations) {
  Schedule s = MakeGPipe(4, 8);
  SimResult r = Simulate(s, Uniform(s, 1.0, 2.0, 0.0));
  EXPECT_DOUBLE_EQ(r.iteration_time_s, (8 + 4 - 1) * 3.0);
  EXPECT_DOUBLE_EQ(r.peak_mem_bytes[0], 8);  // m microbatches on stage 0
  Schedule o = MakeOneFOneB(4, 8);
  SimResult r1 = Simulate(o, Uniform(o, 1.0, 2.0, 0.0));
  EXPECT_DOUBLE_EQ(r1.peak_mem_bytes[0], 4);  // p microbatches on stage 0
  EXPECT_DOUBLE_EQ(r1.peak_mem_bytes[3], 1);
}

TEST(Simulator, InterleavingCutsTheBubbleByTheChunkCount) {
  const int p = 4, m = 8;
  const double F = 1.0, B = 2.0;
  double bubble_1f1b = (p - 1) * (F + B);
  for (int v : {1, 2, 4}) {
    Schedule s = MakeInterleaved(p, m, v);
    SimResult r = Simulate(s, Uniform(s, F / v, B / v, 0.0));
    EXPECT_NEAR(r.iteration_time_s - m * (F + B), bubble_1f1b / v, 1e-9) << v;
  }
}

TEST(Simulator, ZbH1HasAThirdOfOneFOneBsBubble) {
  for (int p : {2, 4, 8}) {
    for (int m : {p, 2 * p, 3 * p + 1}) {
      Schedule zb = MakeZbH1(p, m);
      Schedule ob = MakeOneFOneB(p, m);
      double work = m * 3.0;
      double zb_bubble = Simulate(zb, Uniform(zb, 1, 1, 1)).iteration_time_s - work;
      double ob_bubble = Simulate(ob, Uniform(ob, 1, 1, 1)).iteration_time_s - work;
      EXPECT_DOUBLE_EQ(ob_bubble, 3.0 * (p - 1));
      EXPECT_LE(zb_bubble, ob_bubble / 3 + 1e-12) << p << " " << m;
      // ...without holding more than 1F1B's stage-0 peak (p microbatches) anywhere.
      SimResult r = Simulate(zb, Uniform(zb, 1, 1, 1));
      for (double peak : r.peak_mem_bytes) EXPECT_LE(peak, p);
    }
  }
}

// Under a split backward B frees the microbatch's activations but keeps what
// its deferred weight gradients need until W ends (StageCost::
// weight_grad_hold_bytes): one rank, one microbatch, F B W of 1 s each.
TEST(Simulator, ASplitBackwardHoldsTheWeightGradientsInputsFromBToW) {
  const Schedule s = MakeZbH1(1, 1);
  for (double hold : {1.0, 5.0}) {
    PipelineCosts c = Uniform(s, 1, 1, 1, 3);
    c.stage[0][0].split_backward_transient_bytes = 0.5;
    c.stage[0][0].transient_bytes = 7;  // a whole backward's: not B's
    c.stage[0][0].weight_grad_hold_bytes = hold;
    c.static_bytes = {10};
    const SimResult r = Simulate(s, c);
    // 10 + 3 from F's start, + 0.5 while B runs, 10 + hold after B, 10 after W.
    const std::vector<MemoryPoint> want = {{0, 13}, {1, 13.5}, {2, 10 + hold}, {3, 10}};
    ASSERT_EQ(r.memory[0].size(), want.size()) << hold;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_DOUBLE_EQ(r.memory[0][i].time_s, want[i].time_s) << hold << " " << i;
      EXPECT_DOUBLE_EQ(r.memory[0][i].bytes, want[i].bytes) << hold << " " << i;
    }
    EXPECT_DOUBLE_EQ(r.peak_mem_bytes[0], std::max(13.5, 10 + hold));
  }
}

TEST(Simulator, SendsTakeTheirTimeOnTheCommunicationStream) {
  // p = 2, m = 1: F, send, F, B, send back, B.
  Schedule s = MakeOneFOneB(2, 1);
  SimResult r = Simulate(s, Uniform(s, 1.0, 2.0, 0.0, 1.0, 0.25));
  EXPECT_DOUBLE_EQ(r.iteration_time_s, 2 * 1.0 + 2 * 2.0 + 2 * 0.25);
  // Sends overlap compute: with m = 2, rank 0's second forward runs while the first send is in flight.
  Schedule s2 = MakeGPipe(2, 2);
  SimResult r2 = Simulate(s2, Uniform(s2, 1.0, 1.0, 0.0, 1.0, 0.5));
  // Rank 1: F0 at 1.5, F1 at 2.5 (sent at 2, lands 2.5), B0 at 3.5, B1 at 4.5 (ends 5.5);
  // rank 0: B0 gets its gradient at 4.5 + 0.5 = 5, B1 at 5.5 + 0.5 = 6 -> ends 7.
  EXPECT_DOUBLE_EQ(r2.iteration_time_s, 7.0);
}

TEST(Simulator, GradientSyncOverlapsTheLastBackwardBucketByBucket) {
  Schedule s = MakeOneFOneB(1, 1);
  PipelineCosts c = Uniform(s, 1.0, 0.5, 0.5);
  c.grad_sync_s = {1.0};
  SimOptions overlap;
  overlap.grad_buckets = 4;
  // Buckets ready at 1.25, 1.5, 1.75, 2.0; each takes 0.25; the last ends at 2.25.
  EXPECT_DOUBLE_EQ(Simulate(s, c, overlap).iteration_time_s, 2.25);
  SimOptions serial = overlap;
  serial.overlap_grad_sync = false;
  EXPECT_DOUBLE_EQ(Simulate(s, c, serial).iteration_time_s, 3.0);
}

// Issue 44: a stage that sends an input gradient after its last backward
// still overlaps its buckets with that backward: the collectives have a stream
// of their own. p = 2, m = 1, f = 1, b = 2 (bd 1 + bw 1), free sends: rank 1's
// backward runs 2..4 and sends its gradient at 4; its sync (4 buckets of 1 s)
// is ready at 2.5, 3, 3.5, 4 and runs 2.5..6.5; rank 0's backward runs 4..6,
// its buckets (0.25 s each) end at 6.25. Behind the send rank 1's run 4..8.
TEST(Simulator, GradientSyncIsNotQueuedBehindTheLastGradientSend) {
  Schedule s = MakeOneFOneB(2, 1);
  PipelineCosts c = Uniform(s, 1.0, 1.0, 1.0);
  c.grad_sync_s = {1.0, 4.0};
  SimOptions o;
  o.grad_buckets = 4;
  o.optimizer_step = false;
  EXPECT_DOUBLE_EQ(Simulate(s, c, o).iteration_time_s, 6.5);
  SimOptions behind = o;
  behind.sync_stream = false;
  EXPECT_DOUBLE_EQ(Simulate(s, c, behind).iteration_time_s, 8.0);
}

TEST(Simulator, ReplicasJoinAtTheGradientSync) {
  Schedule s = MakeOneFOneB(2, 4);
  PipelineCosts fast = Uniform(s, 1.0, 2.0, 0.0);
  PipelineCosts slow = Uniform(s, 1.0, 2.0, 0.0);
  slow.stage[1][3].forward_s = 5.0;  // one heavy microbatch in replica 1
  fast.grad_sync_s = slow.grad_sync_s = {0.5, 0.5};
  SimOptions o;
  o.overlap_grad_sync = false;
  o.grad_buckets = 1;
  Simulator both(s, {fast, slow}, o);
  double alone_fast = Simulate(s, fast, o).iteration_time_s;
  double alone_slow = Simulate(s, slow, o).iteration_time_s;
  EXPECT_LT(alone_fast, alone_slow);
  EXPECT_DOUBLE_EQ(both.iteration_time_s(), alone_slow);  // everyone waits for the slow replica
  EXPECT_EQ(both.result().num_ranks(), 4);
  // The fast replica's rank 0 idles in the sync: its bubble is larger than alone.
  Simulator same(s, {fast, fast}, o);
  EXPECT_DOUBLE_EQ(same.iteration_time_s(), alone_fast);
}

void ExpectSameTimes(Simulator& a, Simulator& b) {
  ASSERT_EQ(a.graph().size(), b.graph().size());
  const Schedule& s = a.schedule();
  for (int r = 0; r < s.num_ranks; ++r) {
    for (int i = 0; i < static_cast<int>(s.ranks[r].size()); ++i) {
      ASSERT_EQ(a.start_s(0, r, i), b.start_s(0, r, i)) << r << " " << i;
      ASSERT_EQ(a.end_s(0, r, i), b.end_s(0, r, i)) << r << " " << i;
    }
  }
  EXPECT_EQ(a.iteration_time_s(), b.iteration_time_s());
  EXPECT_EQ(a.result().peak_mem_bytes, b.result().peak_mem_bytes);
  EXPECT_EQ(a.result().bubble_ratio, b.result().bubble_ratio);
}

TEST(Simulator, IncrementalEqualsFullOnRandomizedSchedules) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(0.1, 3.0);
  for (const char* name : {"gpipe", "1f1b", "interleaved", "zb-h1"}) {
    for (int trial = 0; trial < 5; ++trial) {
      int p = 2 + trial % 3, m = p * (1 + trial % 3);
      Schedule s = MakeSchedule(name, p, m, std::string(name) == "interleaved" ? 2 : 1);
      PipelineCosts c = Uniform(s, 1, 1, 1, 1, 0.1);
      for (auto& st : c.stage) {
        for (auto& x : st) {
          x.forward_s = u(rng);
          x.backward_data_s = u(rng);
          x.backward_weight_s = u(rng);
          x.activation_bytes = u(rng);
          x.weight_grad_hold_bytes = u(rng);
          x.send_bytes = u(rng);
        }
      }
      c.grad_sync_s.assign(s.num_stages(), 0.7);
      Simulator inc(s, {c});
      for (int step = 0; step < 20; ++step) {
        if (step % 2 == 0) {
          int a = static_cast<int>(rng() % m), b = static_cast<int>(rng() % m);
          inc.SwapMicrobatches(0, a, b);
          for (auto& st : c.stage) std::swap(st[a], st[b]);
        } else {
          int v = static_cast<int>(rng() % s.num_stages()), mb = static_cast<int>(rng() % m);
          StageCost x = c.stage[v][mb];
          x.forward_s = u(rng);
          x.backward_data_s = u(rng);
          x.send_bytes = u(rng);
          c.stage[v][mb] = x;
          inc.SetCost(0, v, mb, x);
        }
        inc.Resimulate();
        Simulator full(s, {c});
        SCOPED_TRACE(testing::Message() << name << " trial " << trial << " step " << step);
        ExpectSameTimes(inc, full);
      }
    }
  }
}

// A many-to-many edge (Entrain moves samples between microbatches): producer
// microbatch 2 feeds both consumers, so the consumers' forwards wait for it and
// its backward waits for both consumers' backwards. Hand-timed with f = 1, b = 2:
//   rank 0: F0 0-1, F1 1-2, F2 2-3;            rank 1: F'0 3-4 (needs F0, F2), F'1 4-5,
//   rank 1: B'1 5-7, B'0 7-9;                   rank 0: B2 9-11 (needs B'0, B'1), B1 11-13, B0 13-15.
TEST(Simulator, ManyToManyEdgesWaitForEveryPeer) {
  Schedule s;
  s.name = "many-to-many";
  s.num_ranks = 2;
  s.num_microbatches = 3;
  s.stage_rank = {0, 1};
  s.stage_microbatches = {3, 2};
  s.dag = true;
  StageEdge e{0, 1, {}};
  e.producers = {{0, 2}, {1, 2}};
  s.edges = {e};
  auto act = [](ActionKind k, int stage, int mb) { return Action{k, stage, mb}; };
  s.ranks = {{act(ActionKind::kForward, 0, 0), act(ActionKind::kForward, 0, 1), act(ActionKind::kForward, 0, 2),
              act(ActionKind::kBackward, 0, 2), act(ActionKind::kBackward, 0, 1), act(ActionKind::kBackward, 0, 0)},
             {act(ActionKind::kForward, 1, 0), act(ActionKind::kForward, 1, 1), act(ActionKind::kBackward, 1, 1),
              act(ActionKind::kBackward, 1, 0)}};
  AddPointToPoint(s);
  // Producer 2 sends its activation twice (one message per consumer) and receives two gradients.
  int sends_of_2 = 0, grads_to_2 = 0;
  for (const Action& a : s.ranks[0]) {
    sends_of_2 += a.kind == ActionKind::kSend && a.microbatch == 2;
    grads_to_2 += a.kind == ActionKind::kRecv && a.microbatch == 2;
  }
  EXPECT_EQ(sends_of_2, 2);
  EXPECT_EQ(grads_to_2, 2);
  PipelineCosts c;
  c.stage = {std::vector<StageCost>(3), std::vector<StageCost>(2)};
  for (auto& st : c.stage) {
    for (auto& x : st) {
      x.forward_s = 1;
      x.backward_data_s = 2;
    }
  }
  c.static_bytes.assign(2, 0.0);
  c.grad_sync_s.assign(2, 0.0);
  c.p2p = {1.0, 0.0};
  EXPECT_DOUBLE_EQ(Simulate(s, c).iteration_time_s, 15.0);
  // Every producer microbatch must feed someone: an edge that drops one is rejected.
  Schedule bad = s;
  bad.edges[0].producers = {{0}, {2}};
  test::ExpectError([&] { Simulate(bad, c); }, {"microbatch 1 of stage 0 feeds no consumer"});
}

}  // namespace
}  // namespace loom
