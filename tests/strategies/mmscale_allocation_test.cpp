// MMScale's resource allocation (Alg. 1, Eq. 1-2) against the worked check of
// notes/mmscale.md §4-D and brute-force enumeration on small clusters.
#include "loom/strategies/mmscale/allocation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "loom/error.h"

namespace loom {
namespace {

UnitModel Model1(int tp, double time_s) {
  UnitModel m;
  m.tp = tp;
  m.time_s = time_s;
  return m;
}

// Fig. 9 allocation with PP_lm = 2 and the synthetic costs of notes §4-D.
AllocationProblem Fig9() {
  AllocationProblem p;
  p.num_gpus = 32;
  p.global_batch = 24;
  p.gpu_mem_bytes = 80e9;
  p.units = {{"encoder", {Model1(2, 2.0)}, 32, false},
             {"backbone", {Model1(4, 10.0)}, 32, true},
             {"generator", {Model1(4, 1.5)}, 32, false}};
  return p;
}

TEST(MmscaleAllocation, WorkedCheckOfNotesSection4D) {
  const AllocationProblem p = Fig9();
  const std::vector<UnitChoice> c = {{0, 2, 2, 1}, {0, 4, 3, 2}, {0, 4, 1, 1}};
  EXPECT_DOUBLE_EQ(StageTime_s(p, c, 1), 5.0);
  EXPECT_DOUBLE_EQ(StageTime_s(p, c, 0), 3.0);
  EXPECT_DOUBLE_EQ(StageTime_s(p, c, 2), 4.5);
  EXPECT_DOUBLE_EQ(WarmupTime_s(p, c), 17.5);
  EXPECT_DOUBLE_EQ(SteadyTime_s(p, c), 35.0);
  // Continuous optimum for the same TP and DP: a = (12, 120, 18) on 32 GPUs.
  std::vector<double> x;
  const double tau = ContinuousSplit({12, 120, 18}, {0, 0, 0}, 32, &x);
  EXPECT_DOUBLE_EQ(tau, 150.0 / 32);
  EXPECT_NEAR(x[0], 2.56, 1e-12);
  EXPECT_NEAR(x[1], 25.6, 1e-12);
  EXPECT_NEAR(x[2], 3.84, 1e-12);
  EXPECT_DOUBLE_EQ(17.5 + 7 * tau, 50.3125);
  // With at least one PP stage each (x >= TP x DP) water-filling pins the
  // encoder and generator at 4 GPUs and gives the backbone 24: Fig. 9 itself.
  EXPECT_DOUBLE_EQ(ContinuousSplit({12, 120, 18}, {4, 12, 4}, 32, &x), 5.0);
  EXPECT_DOUBLE_EQ(x[1], 24.0);
  // And the integer split of those TP x DP is PP_lm = 2.
  std::vector<int> k;
  ASSERT_TRUE(IntegerSplit({12, 120, 18}, {4, 12, 4}, {1, 1, 1}, {32, 32, 32}, 32, k));
  EXPECT_EQ(k, (std::vector<int>{1, 2, 1}));
}

TEST(MmscaleAllocation, VppDividesTheWarmup) {
  AllocationProblem p = Fig9();
  p.vpp = 2;
  const std::vector<UnitChoice> c = {{0, 2, 2, 1}, {0, 4, 3, 2}, {0, 4, 1, 1}};
  EXPECT_DOUBLE_EQ(WarmupTime_s(p, c), 17.5 / 2);
  EXPECT_DOUBLE_EQ(SteadyTime_s(p, c), 35.0);
}

TEST(MmscaleAllocation, IntegerSplitEqualsBruteForce) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> a(1, 100);
  std::uniform_int_distribution<int> cost(1, 6), kmin(1, 3);
  for (int trial = 0; trial < 300; ++trial) {
    const int U = 2 + trial % 2;
    const int budget = 10 + trial % 40;
    std::vector<double> av(U);
    std::vector<int> c(U), lo(U), hi(U, 12);
    for (int u = 0; u < U; ++u) {
      av[u] = a(rng);
      c[u] = cost(rng);
      lo[u] = kmin(rng);
    }
    double best = 1e300;
    std::vector<int> k(U);
    std::function<void(int, int)> go = [&](int u, int used) {
      if (u == U) {
        double level = 0;
        for (int v = 0; v < U; ++v) level = std::max(level, av[v] / (c[v] * k[v]));
        best = std::min(best, level);
        return;
      }
      for (k[u] = lo[u]; k[u] <= hi[u] && used + c[u] * k[u] <= budget; ++k[u]) go(u + 1, used + c[u] * k[u]);
    };
    go(0, 0);
    std::vector<int> got;
    const bool ok = IntegerSplit(av, c, lo, hi, budget, got);
    EXPECT_EQ(ok, best < 1e300) << "trial " << trial;
    if (!ok) continue;
    double level = 0;
    int used = 0;
    for (int v = 0; v < U; ++v) {
      level = std::max(level, av[v] / (c[v] * got[v]));
      used += c[v] * got[v];
      EXPECT_GE(got[v], lo[v]);
      EXPECT_LE(got[v], hi[v]);
    }
    EXPECT_LE(used, budget);
    EXPECT_NEAR(level, best, 1e-12 * best) << "trial " << trial;
  }
}

// Random small problems: per unit TP 1/2/4 with C(TP) shrinking sub-linearly,
// memory terms that make some PP lower bounds bind.
AllocationProblem RandomProblem(std::mt19937& rng, int gpus, int64_t batch, bool generator) {
  std::uniform_real_distribution<double> c(0.5, 20), frac(0.3, 0.9), mem(0, 60e9), act(0, 15e9);
  AllocationProblem p;
  p.num_gpus = gpus;
  p.global_batch = batch;
  p.gpu_mem_bytes = 80e9;
  p.node_gpus = 8;
  const int units = generator ? 3 : 2;
  for (int u = 0; u < units; ++u) {
    AllocationUnit au;
    au.name = u == 1 ? "backbone" : (u == 0 ? "encoder" : "generator");
    au.backbone = u == 1;
    au.max_pp = 2 + static_cast<int>(rng() % 5);
    double t = c(rng);
    const double w = mem(rng), o = mem(rng), ac = act(rng);
    for (int tp : {1, 2, 4}) {
      UnitModel m;
      m.tp = tp;
      m.time_s = t;
      m.weight_bytes = w / tp;
      m.optimizer_bytes = o / tp;
      m.activation_bytes = ac / tp;
      au.options.push_back(m);
      t *= frac(rng) + 0.1;  // more TP: faster per sample, never more than 2x
      t = std::max(t, 0.5 * au.options.back().time_s);
    }
    p.units.push_back(au);
  }
  return p;
}

TEST(MmscaleAllocation, EqualsBruteForceOnSmallClusters) {
  std::mt19937 rng(2024);
  int compared = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const int gpus = std::vector<int>{8, 12, 16, 24, 32}[trial % 5];
    const int64_t batch = std::vector<int64_t>{8, 12, 16}[trial % 3];
    const AllocationProblem p = RandomProblem(rng, gpus, batch, trial % 2 == 0);
    const Allocation brute = BruteForceAllocation(p);
    const auto fast = AllocateResources(p, 3);
    SCOPED_TRACE("trial " + std::to_string(trial));
    if (brute.units.empty()) {
      EXPECT_TRUE(fast.empty());
      continue;
    }
    ASSERT_FALSE(fast.empty());
    ++compared;
    EXPECT_NEAR(fast[0].iteration_s(), brute.iteration_s(), 1e-9 * brute.iteration_s());
    // The reported allocation is what it claims: valid, within the GPUs, fitting.
    int used = 0;
    for (const auto& c : fast[0].units) used += c.gpus();
    EXPECT_LE(used, gpus);
    EXPECT_TRUE(FitsMemory(p, fast[0].units));
    EXPECT_NEAR(WarmupTime_s(p, fast[0].units) + SteadyTime_s(p, fast[0].units), fast[0].iteration_s(),
                1e-9 * fast[0].iteration_s());
    EXPECT_LE(fast[0].continuous_iteration_s, fast[0].iteration_s() + 1e-9);
    for (size_t i = 1; i < fast.size(); ++i) EXPECT_GE(fast[i].iteration_s(), fast[i - 1].iteration_s());
  }
  EXPECT_GE(compared, 40);
}

TEST(MmscaleAllocation, RatioBaselineIsNeverBetterThanTheExactSplit) {
  std::mt19937 rng(99);
  for (int trial = 0; trial < 30; ++trial) {
    const AllocationProblem p = RandomProblem(rng, 32, 16, true);
    const auto exact = AllocateResources(p, 1);
    const auto ratio = RatioAllocation(p, {1.0, 8.0, 2.0}, 1);
    if (ratio.empty()) continue;
    ASSERT_FALSE(exact.empty());
    EXPECT_LE(exact[0].iteration_s(), ratio[0].iteration_s() + 1e-9);
  }
}

TEST(MmscaleAllocation, RejectsBadProblems) {
  AllocationProblem p = Fig9();
  p.units[1].backbone = false;
  EXPECT_THROW(AllocateResources(p), Error);
  p = Fig9();
  p.num_gpus = 0;
  EXPECT_THROW(AllocateResources(p), Error);
  // Infeasible: the backbone's state does not fit even at PP = max.
  p = Fig9();
  p.units[1].options[0].weight_bytes = 1e15;
  EXPECT_TRUE(AllocateResources(p).empty());
}

}  // namespace
}  // namespace loom
