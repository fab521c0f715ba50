// PipeWeaver's search levels on hand-built stage flows: the dual-queue
// interleaving against the 1F1B closed form, its memory cap and ordering
// consistency; the MCTS ranking against exhaustive enumeration; the whole
// search against the full ILP of §3.1 (CBC) on tiny instances; layer tuning
// against brute force.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <numeric>

#include "loom/strategies/pipeweaver/full_ilp.h"
#include "loom/strategies/pipeweaver/interleave.h"
#include "loom/strategies/pipeweaver/layer_tuning.h"
#include "loom/strategies/pipeweaver/partitioner.h"
#include "loom/strategies/pipeweaver/ranking.h"
#include "strategies/pipeweaver_flow.h"

namespace loom {
namespace {

TEST(PipeweaverPartitioner, SegmentCountsAreFloorOfTheLatencyRatioCapped) {
  // K_i = floor(T_i / T_1): 1, floor(2.5) = 2, floor(4.1) = 4.
  EXPECT_EQ(SegmentCounts({1.0, 2.5, 4.1}, {64, 64, 64}, 4), (std::vector<int>{1, 2, 4}));
  // Order does not matter; T_1 is the fastest.
  EXPECT_EQ(SegmentCounts({4.1, 1.0, 2.5}, {64, 64, 64}, 4), (std::vector<int>{4, 1, 2}));
  // A module with 4 layers on 4 ranks can have one segment only; max_segments caps 9 to 4.
  EXPECT_EQ(SegmentCounts({1.0, 2.5, 9.5}, {64, 4, 64}, 4), (std::vector<int>{1, 1, 4}));
}

TEST(PipeweaverInterleave, UniformFlowReproducesOneFOneBClosedForm) {
  // One module, one segment, no sub-microbatches: (m + p - 1)(f + b).
  for (int P : {2, 4}) {
    for (int m : {4, 8}) {
      const StageFlow flow = MakeFlow(P, {{1, 1, 1.0, 2.0, 1.0}}, m);
      const Interleaving r = Interleaver(flow).Run(DefaultRanking(flow));
      EXPECT_NEAR(r.makespan_s, (m + P - 1) * 3.0, 1e-9) << "P=" << P << " m=" << m;
      EXPECT_TRUE(r.fits);
      // Unbounded, idle time fills with forwards; with room for P
      // microbatches (1F1B's warm-up on rank 0) the time is the same.
      EXPECT_GE(r.peak_bytes[0], P);
      const StageFlow capped = MakeFlow(P, {{1, 1, 1.0, 2.0, 1.0}}, m, 0, P);
      const Interleaving c = Interleaver(capped).Run(DefaultRanking(capped));
      EXPECT_NEAR(c.makespan_s, (m + P - 1) * 3.0, 1e-9);
      EXPECT_TRUE(c.fits);
      EXPECT_LE(c.peak_bytes[0], P + 1e-9);
    }
  }
}

TEST(PipeweaverInterleave, ForwardQueuePausesAtTheMemoryCapacity) {
  const std::vector<FlowModule> mods{{1, 2, 1.0, 2.0, 3.0}, {1, 1, 2.0, 4.0, 5.0}};
  const StageFlow open = MakeFlow(2, mods, 6, 0.05);
  const StageFlow tight = MakeFlow(2, mods, 6, 0.05, 12.0);
  const Interleaving a = Interleaver(open).Run(DefaultRanking(open));
  const Interleaving b = Interleaver(tight).Run(DefaultRanking(tight));
  EXPECT_GT(*std::max_element(a.peak_bytes.begin(), a.peak_bytes.end()), 12.0);
  EXPECT_TRUE(b.fits);
  for (double peak : b.peak_bytes) EXPECT_LE(peak, 12.0 + 1e-9);
  EXPECT_GE(b.makespan_s, a.makespan_s - 1e-9);  // memory costs time, never saves it
}

TEST(PipeweaverInterleave, OrdersAreConsistentAcrossRanks) {
  // Observation 3 (Fig. 8d): two forwards of one module that run in some
  // order on rank p run in the same order on rank p + 1.
  const StageFlow flow = MakeFlow(4, {{1, 3, 0.5, 1.0, 1.0}, {2, 1, 1.0, 2.0, 1.0}}, 4, 0.01, 1e18, 0.4, 7);
  Interleaver il(flow);
  // A valid ranking other than the default: microbatches in reverse.
  std::vector<int> position(flow.num_events());
  int place = 0;
  for (int k = flow.num_microbatches - 1; k >= 0; --k) {
    for (int step = 0; step < 2 * flow.num_modules; ++step) position[flow.event(step, k)] = place++;
  }
  const Interleaving r = il.Run(position);
  std::vector<int> at(flow.stages.size());
  for (const auto& order : r.order) {
    for (size_t x = 0; x < order.size(); ++x) at[order[x]] = static_cast<int>(x);
  }
  int checked = 0;
  for (size_t s = 0; s + 1 < flow.forward_id.size(); ++s) {
    if (flow.stages[flow.forward_id[s][0]].module != flow.stages[flow.forward_id[s + 1][0]].module) continue;
    const auto& here = flow.forward_id[s];
    const auto& next = flow.forward_id[s + 1];
    for (size_t a = 0; a < here.size(); ++a) {
      for (size_t b = 0; b < here.size(); ++b) {
        if (at[here[a]] < at[here[b]]) {
          EXPECT_LT(at[next[a]], at[next[b]]);
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 100);
}

// Every valid ranking (each microbatch's modules in order) of a small flow.
void ForEachRanking(const StageFlow& flow, const std::function<void(const std::vector<int>&)>& visit) {
  std::vector<int> next(flow.num_microbatches, 0), position(flow.num_events());
  std::function<void(int)> rec = [&](int at) {
    if (at == flow.num_events()) return visit(position);
    for (int k = 0; k < flow.num_microbatches; ++k) {
      if (next[k] == 2 * flow.num_modules) continue;
      position[flow.event(next[k], k)] = at;
      ++next[k];
      rec(at + 1);
      --next[k];
    }
  };
  rec(0);
}

TEST(PipeweaverRanking, ExhaustsATinySpaceAndFindsTheBestRanking) {
  const StageFlow flow = MakeFlow(2, {{1, 2, 1.0, 2.0, 1.0}, {1, 1, 3.0, 6.0, 1.0}}, 2, 0.1, 1e18, 0.5, 3);
  double best = 1e18, worst = 0;
  int count = 0;
  Interleaver il(flow);
  ForEachRanking(flow, [&](const std::vector<int>& pos) {
    const double t = il.Run(pos).makespan_s;
    best = std::min(best, t);
    worst = std::max(worst, t);
    ++count;
  });
  EXPECT_EQ(count, 70);           // 8! / (4!)^2: two microbatches' chains of 4 events (F, F, B, B) merged
  EXPECT_GT(worst, best * 1.01);  // the ranking matters on this instance
  RankingOptions o;
  o.budget_s = 60;
  o.max_rollouts = 100000;
  const RankingResult r = RankByMcts(flow, o);
  EXPECT_TRUE(r.exhausted);
  EXPECT_NEAR(r.best.makespan_s, best, 1e-9);
}

TEST(PipeweaverRanking, DeterministicForASeedAndNeverWorseThanTheDefault) {
  const StageFlow flow = MakeFlow(4, {{1, 3, 0.5, 1.0, 1.0}, {2, 1, 1.0, 2.0, 1.0}}, 8, 0.02, 1e18, 0.6, 11);
  RankingOptions o;
  o.seed = 42;
  o.budget_s = 60;
  o.max_rollouts = 300;
  const RankingResult a = RankByMcts(flow, o);
  const RankingResult b = RankByMcts(flow, o);
  EXPECT_EQ(a.position, b.position);
  EXPECT_EQ(a.best.makespan_s, b.best.makespan_s);
  EXPECT_EQ(a.rollouts, b.rollouts);
  const double def = Interleaver(flow).Run(DefaultRanking(flow)).makespan_s;
  EXPECT_LE(a.best.makespan_s, def + 1e-12);
  // Parallel workers share the tree and still return a valid, no-worse ranking.
  o.workers = 2;
  const RankingResult c = RankByMcts(flow, o);
  EXPECT_LE(c.best.makespan_s, def + 1e-12);
  EXPECT_GE(c.rollouts, o.max_rollouts);
}

TEST(PipeweaverExactness, SearchIsWithinFivePercentOfTheFullIlp) {
  // 2 to 4 ranks, 8 stages per rank: 2 microbatches x 2 modules x (F, B).
  struct Case {
    int P;
    std::vector<FlowModule> modules;
    double capacity;
    unsigned seed;
  };
  const std::vector<Case> cases = {
      {2, {{1, 1, 1.0, 2.0, 2.0}, {1, 1, 2.0, 4.0, 3.0}}, 1e18, 1},
      {2, {{1, 1, 1.5, 3.0, 2.0}, {1, 1, 1.0, 2.0, 3.0}}, 6.0, 2},
      {3, {{1, 1, 0.7, 1.4, 1.0}, {1, 1, 1.3, 2.6, 1.0}}, 1e18, 3},
      {4, {{1, 1, 0.5, 1.0, 1.0}, {1, 1, 1.0, 2.0, 1.0}}, 1e18, 4},
  };
  for (const auto& c : cases) {
    const StageFlow flow = MakeFlow(c.P, c.modules, 2, 0.05, c.capacity, 0.3, c.seed);
    RankingOptions o;
    o.budget_s = 30;
    o.max_rollouts = 100000;
    const RankingResult search = RankByMcts(flow, o);
    const ExactSchedule exact = SolveFullIlp(flow, 120);
    ASSERT_TRUE(exact.solved) << "P=" << c.P;
    const double gap = search.best.makespan_s / exact.makespan_s - 1;
    std::printf("exactness P=%d capacity=%g: search %.4f s, ILP optimum %.4f s (%d vars, %d rows): %+.2f%%\n", c.P,
                c.capacity, search.best.makespan_s, exact.makespan_s, exact.variables, exact.rows, 100 * gap);
    EXPECT_GE(gap, -1e-6);  // the ILP is a lower bound on any schedule
    // Without a binding memory limit the search is within 5% (it finds the
    // optimum on these). With one, the dual queue pauses forwards greedily
    // and loses more: a known limit of the heuristic (docs/results/pipeweaver.md).
    EXPECT_LE(gap, c.capacity < 1e17 ? 0.15 : 0.05);
  }
}

// All combinations of per-layer choices, for brute force.
void ForEachPick(int n, const std::function<void(const std::vector<int>&)>& visit) {
  std::vector<int> pick(n, 0);
  while (true) {
    visit(pick);
    int l = 0;
    while (l < n && ++pick[l] == 3) pick[l++] = 0;
    if (l == n) return;
  }
}

std::vector<std::array<LayerTimes, 3>> RandomLayers(std::mt19937& rng, int n) {
  std::uniform_real_distribution<double> u(0.5, 1.5);
  std::vector<std::array<LayerTimes, 3>> layers(n);
  for (auto& l : layers) {
    const double f = u(rng), act = 10 * u(rng);
    // none: fastest, most memory; selective: a little slower, less; full: forward again, input only.
    l[0] = {f, 2 * f, 0, act, 0, 0};
    l[1] = {f, 2 * f + 0.1 * f * u(rng), 0, act * 0.6 * u(rng), 0, 0};
    l[2] = {f, 3 * f, 0, act * 0.1, 0, 0};
  }
  return layers;
}

TEST(PipeweaverLayerTuning, KnapsackCandidatesAreWithinTheirBoundAndNearTheBest) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 30; ++trial) {
    const int n = 2 + trial % 5;
    const auto layers = RandomLayers(rng, n);
    const auto cands = PairCandidates(layers, 4, 64);
    ASSERT_GE(cands.size(), 2u);
    EXPECT_EQ(cands[0].layers, std::string(n, 'n'));  // the fastest combination
    double lo = 0, hi = 0;
    for (const auto& l : layers) {
      lo += std::min({l[0].activation_bytes, l[1].activation_bytes, l[2].activation_bytes});
      hi += l[0].activation_bytes;
    }
    EXPECT_NEAR(cands.back().activation_bytes, lo, 1e-9);  // the most frugal one
    // Intermediate candidates: the brute-force best within the bound, up to the grid rounding.
    const double step = (hi - lo) / 64;
    for (size_t c = 1; c + 1 < cands.size(); ++c) {
      double best_within = 1e18;
      ForEachPick(n, [&](const std::vector<int>& pick) {
        double t = 0, mem = 0;
        for (int l = 0; l < n; ++l)
          t += layers[l][pick[l]].forward_s + layers[l][pick[l]].backward_data_s,
              mem += layers[l][pick[l]].activation_bytes;
        if (mem <= cands[c].activation_bytes + n * step + 1e-9) best_within = std::min(best_within, t);
      });
      EXPECT_LE(cands[c].time_s, best_within * 1.25 + 1e-9);
      EXPECT_GE(cands[c].time_s, cands[0].time_s - 1e-9);
    }
  }
}

TEST(PipeweaverLayerTuning, IlpMatchesBruteForceWithinTheGap) {
  std::mt19937 rng(9);
  for (int trial = 0; trial < 10; ++trial) {
    // 2 ranks, 2 sub-microbatches of 2 stages: 4 stage pairs per flow.
    StageFlow flow = MakeFlow(2, {{1, 1, 1.0, 2.0, 20.0}}, 2);
    const Interleaving tl = Interleaver(flow).Run(DefaultRanking(flow));
    std::vector<int> pairs;
    std::vector<std::vector<TuningCandidate>> cands;
    for (size_t s = 0; s < flow.forward_id.size(); ++s) {
      for (int id : flow.forward_id[s]) {
        pairs.push_back(id);
        cands.push_back(PairCandidates(RandomLayers(rng, 3), 4));
      }
    }
    double peak = 0;
    for (const auto& c : cands) peak += c.front().activation_bytes;
    for (double& cap : flow.capacity_bytes) cap = peak * (0.35 + 0.05 * trial);
    const TuningResult r = TuneLayers(flow, tl, pairs, cands);
    TuningOptions greedy_only;
    greedy_only.use_solver = false;
    const TuningResult g = TuneLayers(flow, tl, pairs, cands, greedy_only);
    // Brute force over every candidate combination with the same live sets.
    double best = 1e18;
    std::vector<int> pick(pairs.size(), 0);
    std::function<void(size_t)> rec = [&](size_t i) {
      if (i == pairs.size()) {
        // Feasible when every rank's live set at every pair start fits (checked as TuneLayers defines it).
        TuningOptions check;
        double t = 0;
        for (size_t x = 0; x < pairs.size(); ++x) t += cands[x][pick[x]].time_s;
        std::vector<std::vector<TuningCandidate>> fixed(pairs.size());
        for (size_t x = 0; x < pairs.size(); ++x) fixed[x] = {cands[x][pick[x]]};
        check.use_solver = false;
        if (TuneLayers(flow, tl, pairs, fixed, check).feasible) best = std::min(best, t);
        return;
      }
      for (size_t c = 0; c < cands[i].size(); ++c) {
        pick[i] = static_cast<int>(c);
        rec(i + 1);
      }
    };
    rec(0);
    ASSERT_EQ(r.feasible, best < 1e18) << "trial " << trial;
    if (!r.feasible) continue;
    EXPECT_LE(r.objective_s, best * 1.05 + 1e-9) << "trial " << trial;
    EXPECT_GE(r.objective_s, best - 1e-9);
    EXPECT_LE(r.objective_s, g.objective_s + 1e-9);  // never worse than its warm start
  }
}

}  // namespace
}  // namespace loom
