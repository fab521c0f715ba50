// Mosaic (seed 000): the SM-sharing model against closed forms and the H100's
// measurements, StageEval against brute force over options and placements,
// GAHC against exhaustive search over stage partitions, and the strategy's
// plans on zoo models.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <set>

#include "loom/cost/cost_model.h"
#include "loom/cost/profile.h"
#include "loom/cost/shipped_profiles.h"
#include "loom/cost/sm_measurements.h"
#include "loom/data/sample_source.h"
#include "loom/error.h"
#include "loom/plan/compile_plan.h"
#include "loom/plan/validate_plan.h"
#include "loom/sim/plan_run.h"
#include "loom/sim/price_execution.h"
#include "loom/spec/cluster.h"
#include "loom/spec/zoo.h"
#include "loom/strategies/mosaic/mapping_memory.h"
#include "loom/strategies/mosaic/mosaic.h"
#include "loom/strategies/strategy.h"

namespace loom {
namespace {

using namespace mosaic;

TEST(SmSharing, QuotasAreWholePartitionsNeverClamped) {
  const SmPartitionRules h100;          // 132 SMs, at least 8, multiples of 8
  EXPECT_EQ(QuotaSms(0.1, h100), 16);   // 13.2 SMs -> 16
  EXPECT_EQ(QuotaSms(0.05, h100), 8);   // 6.6 -> the minimum
  EXPECT_EQ(QuotaSms(0.5, h100), 64);   // 66 -> 64
  EXPECT_EQ(QuotaSms(0.9, h100), 120);  // 118.8 -> 120
  EXPECT_EQ(QuotaSms(1.0, h100), 132);  // the whole GPU
  EXPECT_EQ(QuotaSms(0.0, h100), 0);
  // 10% + 90% round past the GPU: the caller sees 136 > 132 (infeasible).
  EXPECT_GT(QuotaSms(0.1, h100) + QuotaSms(0.9, h100), h100.sm_count);
}

TEST(SmSharing, ScalingLawClosedForms) {
  SmSharing s;
  EXPECT_DOUBLE_EQ(s.ScaledTime_s(2.0, 0.25), 8.0);  // serial 0: time / fraction
  s.serial_fraction = 0.3;
  EXPECT_DOUBLE_EQ(s.ScaledTime_s(2.0, 0.25), 2.0 * (0.3 + 0.7 * 4));
  EXPECT_DOUBLE_EQ(s.ScaledTime_s(2.0, 1.0), 2.0);
  EXPECT_DOUBLE_EQ(s.Slowdown({0.5}), 0.0);  // alone: no interference
  s.e1 = 0.01;
  s.e2 = 0.2;
  s.e3 = 0.5;
  EXPECT_NEAR(s.Slowdown({0.5, 0.4}), 0.01 + 0.2 * 0.9 + 0.5 * 0.2, 1e-12);
  s.launch_floor_s_per_layer = 0.3;  // a phase never under 0.1 s; a phase not run stays 0
  EXPECT_DOUBLE_EQ(s.PhaseTime_s(0.01, 0.5), 0.1);
  EXPECT_DOUBLE_EQ(s.PhaseTime_s(1.0, 0.5), 1.0 * (0.3 + 0.7 * 2));
  EXPECT_DOUBLE_EQ(s.PhaseTime_s(0.0, 0.5), 0.0);
}

// The simulator's shared host: two co-located modules of a tiny model (far
// under the H100's launch floor) each take the floors of both, layers x 1.62
// ms; on GPUs of their own each takes at most its own.
TEST(SmSharing, SimulatorStretchesColocatedStagesToTheSharedHostFloor) {
  const Model model = LoadModel(std::string(LOOM_TEST_DATA) + "/runtime/tiny-vlm2.yaml");
  Cluster cluster = MakeCluster("h100", 1, 2);
  ApplyCostModel(cluster, "default");
  const Workload w = LoadWorkload(std::string(LOOM_TEST_DATA) + "/runtime/tiny-laion.yaml");
  const Batch batch = DrawBatch(w, 0);
  const auto ctx = StrategyContext{model, cluster, w, batch, {}};
  const double floor_s = DefaultCostModel(FindGpu("h100"))->sm_sharing().launch_floor_s_per_layer;
  ASSERT_GT(floor_s, 0);
  Plan plan = RunStrategy("mosaic", ctx).plan;
  const int vision = plan.FindUnit("vision"), coarse = plan.FindUnit("coarse");
  ASSERT_GE(vision, 0);
  ASSERT_GE(coarse, 0);
  const int layers = static_cast<int>(model.modules[model.FindModule("vision")].layers.size() +
                                      model.modules[model.FindModule("coarse")].layers.size());
  for (int apart = 0; apart < 2; ++apart) {
    for (int u : {vision, coarse}) {
      plan.units[u].phase = 0;
      plan.units[u].sm_fraction = 0.5;
      plan.units[u].first_group = u == coarse ? apart : 0;
    }
    ASSERT_TRUE(PlanViolations(plan, model, cluster, w).empty());
    const ExecutionPlan exec = CompilePlan(model, cluster, w, plan, batch, nullptr);
    const ExecutionCosts costs = PriceExecution(exec, model, cluster, batch, nullptr);
    for (int s = 0; s < static_cast<int>(exec.stages.size()); ++s) {
      const int u = exec.stages[s].unit;
      if (u != vision && u != coarse) continue;
      for (const StageCost& c : costs.replicas[0].stage[s]) {
        const double t = c.forward_s + c.backward_data_s + c.backward_weight_s;
        if (apart == 0) {
          EXPECT_NEAR(t, floor_s * layers, 1e-12) << plan.units[u].name;
        } else {
          EXPECT_LT(t, floor_s * layers * 0.75) << plan.units[u].name;
        }
      }
    }
  }
}

// An H100's co-located partitions hold 120 SMs at most: two modules that
// each need 64 SMs fit one GPU only where all 132 can be partitioned.
TEST(MosaicStageEval, CoLocatedQuotasFitThePartitionableSms) {
  std::vector<ModuleSurface> s;
  for (int m = 0; m < 2; ++m) {
    ModuleSurface x;
    x.module = "m" + std::to_string(m);
    x.index = m;
    x.points.push_back({1, 64, 0.01, 0, 1e9, 0.1});
    s.push_back(x);
  }
  for (int partitionable : {132, 120}) {
    SmPartitionRules rules;
    rules.partitionable_sms = partitionable;
    for (bool fits : {true, false}) {
      StageEvalOptions o;
      o.greedy_first = fits;
      o.exact_search = fits;  // off: CBC decides
      StageEvaluator eval(s, 1, 80e9, rules, SmSharing{}, o);
      EXPECT_EQ(eval.Evaluate({0, 1}).feasible(), partitionable == 132) << partitionable << " " << fits;
    }
  }
}

TEST(SmSharing, FitRecoversAKnownLaw) {
  SmSharing truth;
  truth.serial_fraction = 0.25;
  truth.launch_floor_s_per_layer = 1e-3;
  std::vector<SmScalingPoint> pts;
  const double compute[] = {0.002, 0.02, 0.2};
  const int layers[] = {12, 12, 4};
  for (int m = 0; m < 3; ++m) {
    for (int sms = 8; sms <= 132; sms += 8) {
      const double t =
          std::max(truth.launch_floor_s_per_layer * layers[m], truth.ScaledTime_s(compute[m], sms / 132.0));
      pts.push_back({"m" + std::to_string(m), layers[m], sms, t});
    }
  }
  const SmScalingFit fit = FitSmScaling(pts, 132);
  EXPECT_NEAR(fit.law.serial_fraction, 0.25, 0.01);
  EXPECT_NEAR(fit.law.launch_floor_s_per_layer, 1e-3, 2e-5);
  EXPECT_LT(fit.mean_abs_error, 0.005);
  EXPECT_NEAR(fit.modules[2].compute_s, 0.2, 0.002);
}

TEST(SmSharing, InterferenceFitRecoversEquation8) {
  std::vector<InterferencePoint> pts;
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(0.05, 0.9);
  for (int i = 0; i < 30; ++i) {
    const double a = u(rng), b = u(rng);
    pts.push_back({"p", {a, b}, 0.02 + 0.1 * (a + b) + 0.6 * a * b});
  }
  const InterferenceFit fit = FitInterference(pts);
  EXPECT_NEAR(fit.full.e1, 0.02, 1e-9);
  EXPECT_NEAR(fit.full.e2, 0.1, 1e-9);
  EXPECT_NEAR(fit.full.e3, 0.6, 1e-9);
  EXPECT_NEAR(fit.r2_full, 1.0, 1e-9);
  EXPECT_LT(fit.r2_additive, fit.r2_full);
}

// The shipped H100 profile's block is what `loom fit-sm` fits on the copy of
// the measurements; the surfaces fit within 10% on average.
TEST(SmSharing, H100ProfileCarriesTheFitOfTheMeasurements) {
  const SmSharingReport rep = FitSmSharing(std::string(LOOM_TEST_DATA) + "/h100", FindGpu("h100"));
  const SmSharing shipped = DefaultCostModel(FindGpu("h100"))->sm_sharing();
  EXPECT_NEAR(shipped.serial_fraction, rep.law.serial_fraction, 1e-3);
  EXPECT_NEAR(shipped.launch_floor_s_per_layer, rep.law.launch_floor_s_per_layer, 1e-6);
  EXPECT_NEAR(shipped.e1, rep.law.e1, 1e-4);
  EXPECT_LT(rep.scaling.mean_abs_error, 0.10);
  for (const auto& m : rep.scaling.modules) EXPECT_LT(m.mean_abs_error, 0.15) << m.module;
  // The shared host explains the co-locations far better than bandwidth alone.
  EXPECT_GT(rep.interference.r2_host_only, 0.8);
  EXPECT_LT(rep.interference.r2_full, 0.5);
}

// A synthetic surface: latency = work / (dp * sms / 132) + sync(dp), memory per GPU, floors.
ModuleSurface Synthetic(int index, double work_s, double floor_s, double mem, int max_dp) {
  ModuleSurface s;
  s.module = "m" + std::to_string(index);
  s.index = index;
  for (int d = 1; d <= max_dp; d *= 2) {
    for (int sms : {32, 64, 96, 132}) {
      SurfacePoint p;
      p.dp = d;
      p.sms = sms;
      p.latency_s = std::max(floor_s, work_s / d * (0.3 + 0.7 * 132.0 / sms)) + 0.002 * (d > 1 ? std::log2(d) : 0);
      p.launch_floor_s = floor_s;
      p.mem_bytes = mem;
      s.points.push_back(p);
    }
  }
  return s;
}

// Brute force: every option and aligned block per module; the stage time is
// the largest latency and per-GPU sum of floors among assignments that fit.
double BruteStage(const std::vector<ModuleSurface>& surfaces, const std::vector<int>& modules, int gpus,
                  double mem_cap) {
  double best = std::numeric_limits<double>::infinity();
  std::vector<int> sm(gpus, 0);
  std::vector<double> mem(gpus, 0), floors(gpus, 0);
  std::function<void(size_t, double)> rec = [&](size_t k, double worst) {
    if (k == modules.size()) {
      double t = worst;
      for (double f : floors) t = std::max(t, f);
      best = std::min(best, t);
      return;
    }
    for (const auto& p : surfaces[modules[k]].points) {
      for (int s = 0; s + p.dp <= gpus; s += p.dp) {
        bool fits = true;
        for (int g = s; g < s + p.dp; ++g) fits = fits && sm[g] + p.sms <= 132 && mem[g] + p.mem_bytes <= mem_cap;
        if (!fits) continue;
        for (int g = s; g < s + p.dp; ++g) {
          sm[g] += p.sms;
          mem[g] += p.mem_bytes;
          floors[g] += p.launch_floor_s;
        }
        rec(k + 1, std::max(worst, p.latency_s));
        for (int g = s; g < s + p.dp; ++g) {
          sm[g] -= p.sms;
          mem[g] -= p.mem_bytes;
          floors[g] -= p.launch_floor_s;
        }
      }
    }
  };
  rec(0, 0);
  return best;
}

std::vector<ModuleSurface> RandomSurfaces(std::mt19937& rng, int n, int gpus) {
  std::uniform_real_distribution<double> work(0.005, 0.2), floor(0.0, 0.02), mem(10e9, 50e9);
  std::vector<ModuleSurface> s;
  for (int i = 0; i < n; ++i) s.push_back(Synthetic(i, work(rng), floor(rng), mem(rng), gpus));
  return s;
}

SmSharing HostFloorOnly() {
  SmSharing s;
  s.launch_floor_s_per_layer = 1;  // switches the floor rows on; the surfaces carry the floors
  return s;
}

// Each way a target is decided: fits, the depth-first search, CBC alone.
TEST(MosaicStageEval, MatchesBruteForceByFitsSearchAndCbc) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 30; ++trial) {
    const int gpus = trial % 2 ? 4 : 2;
    const auto surfaces = RandomSurfaces(rng, 3, gpus);
    for (int mode = 0; mode < 3; ++mode) {
      const bool greedy = mode == 0;
      StageEvalOptions o;
      o.greedy_first = mode == 0;
      o.exact_search = mode == 1;
      StageEvaluator eval(surfaces, gpus, 80e9, SmPartitionRules{}, HostFloorOnly(), o);
      eval.ReserveOthers(false);  // the brute force gives each stage the whole memory
      SCOPED_TRACE(testing::Message() << "mode " << mode);
      for (const std::vector<int>& stage : {std::vector<int>{0}, {0, 1}, {0, 1, 2}}) {
        const double brute = BruteStage(surfaces, stage, gpus, 80e9);
        const StageResult r = eval.Evaluate(stage);
        SCOPED_TRACE(testing::Message() << "trial " << trial << " greedy " << greedy << " modules " << stage.size());
        if (mode == 2 && stage.size() > 1 && !std::isinf(brute)) {
          EXPECT_GT(eval.milp_solves(), 0);
        }
        if (std::isinf(brute)) {
          EXPECT_FALSE(r.feasible());
        } else {
          EXPECT_NEAR(r.time_s, brute, 1e-12);
        }
      }
    }
  }
}

// Every partition into legal stages, each evaluated exactly: GAHC finds the
// optimum on up to 4 modules (the bar; the paper's solver is 100% there too).
TEST(MosaicGahc, OptimalAgainstExhaustiveUpToFourModules) {
  std::mt19937 rng(5);
  int optimal = 0, total = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const int n = 2 + trial % 3, gpus = 4;
    const auto surfaces = RandomSurfaces(rng, n, gpus);
    std::vector<std::vector<int>> deps(n);
    for (int m = 1; m < n; ++m) {
      if (rng() % 3 == 0) deps[m].push_back(static_cast<int>(rng() % m));
    }
    StageEvaluator eval(surfaces, gpus, 80e9, SmPartitionRules{}, HostFloorOnly());
    eval.ReserveOthers(false);
    const Mapping g = SolveGahc(deps, eval);
    const Mapping e = SolveExhaustive(deps, eval);
    ASSERT_TRUE(e.feasible());
    ++total;
    if (g.time_s <= e.time_s * (1 + 1e-9)) ++optimal;
    EXPECT_LE(e.time_s, g.time_s * (1 + 1e-9));
    // Stages respect every dependency (Eq. 3).
    std::vector<int> stage_of(n);
    for (int s = 0; s < static_cast<int>(g.stages.size()); ++s) {
      for (int m : g.stages[s].modules) stage_of[m] = s;
    }
    for (int m = 0; m < n; ++m) {
      for (int d : deps[m]) EXPECT_LT(stage_of[d], stage_of[m]);
    }
  }
  EXPECT_EQ(optimal, total);
}

// a -> b, c -> d: with {b, c} merged, {a} and {d} are joined by a path
// (a -> {b,c} -> d) though no module edge joins them: never one stage.
TEST(MosaicGahc, LegalityFollowsPathsInTheStageGraph) {
  std::vector<ModuleSurface> s;
  // b and c gain most together; a and d would gain next.
  s.push_back(Synthetic(0, 0.05, 0.04, 10e9, 4));
  s.push_back(Synthetic(1, 0.05, 0.04, 10e9, 4));
  s.push_back(Synthetic(2, 0.05, 0.04, 10e9, 4));
  s.push_back(Synthetic(3, 0.05, 0.04, 10e9, 4));
  const std::vector<std::vector<int>> deps = {{}, {0}, {}, {2}};  // a=0 -> b=1, c=2 -> d=3
  StageEvaluator eval(s, 4, 80e9, SmPartitionRules{}, HostFloorOnly());
  eval.ReserveOthers(false);
  const Mapping g = SolveGahc(deps, eval);
  std::vector<int> stage_of(4);
  for (int k = 0; k < static_cast<int>(g.stages.size()); ++k) {
    for (int m : g.stages[k].modules) stage_of[m] = k;
  }
  EXPECT_LT(stage_of[0], stage_of[1]);
  EXPECT_LT(stage_of[2], stage_of[3]);
  if (stage_of[1] == stage_of[2]) {
    EXPECT_NE(stage_of[0], stage_of[3]);
  }
  EXPECT_LE(SolveExhaustive(deps, eval).time_s, g.time_s * (1 + 1e-9));
}

StrategyContext Context(const Model& model, const Cluster& cluster, const Workload& w, const Batch& b) {
  return StrategyContext{model, cluster, w, b, {}};
}

// The strategy plans Mosaic's zoo models on one H100 node; plans validate,
// put co-located modules within the SMs, and repeat exactly.
TEST(MosaicStrategy, PlansZooModelsDeterministically) {
  Cluster cluster = MakeCluster("h100", 1, 8);
  ApplyCostModel(cluster, "default");  // the shipped H100 profile, with its launch floor
  for (const char* name : {"clip-vit-l", "imagebind", "ofasys"}) {
    SCOPED_TRACE(name);
    const Model model = LoadModel(name);
    Workload w = LoadWorkload("mosaic-fixed");
    w.global_batch = 32;
    const Batch batch = DrawBatch(w, 0);
    const auto ctx = Context(model, cluster, w, batch);
    const StrategyResult a = RunStrategy("mosaic", ctx);
    const StrategyResult b = RunStrategy("mosaic", ctx);
    EXPECT_EQ(a.plan, b.plan);
    for (const auto& v : PlanViolations(a.plan, model, cluster, w)) ADD_FAILURE() << v;
    bool shares = false;
    for (const auto& u : a.plan.units) {
      EXPECT_EQ(u.modules.size(), 1u);
      const int sms = static_cast<int>(std::lround(u.sm_fraction * 132));
      EXPECT_TRUE(sms == 132 || (sms >= 8 && sms % 8 == 0)) << u.name << " " << sms;
      if (u.sm_fraction < 1) shares = true;
    }
    EXPECT_TRUE(shares);  // every one of these co-locates some modules
  }
}

// Loom's slots: a model whose data-parallel copy does not fit one GPU
// (llama-70b: 2 + 2 bytes of weights and gradients per parameter alone are
// 280 GB) gets no mapping
// from the paper's search (slots of 1 GPU) and a TP-sharded one from the
// default; every unit then has the slot's TP, the plan's groups are slots,
// and the plan validates.
TEST(MosaicStrategy, ModulesTooBigForOneGpuGetTensorParallelSlots) {
  Cluster cluster = MakeCluster("h100", 4, 8);
  ApplyCostModel(cluster, "default");
  const Model model = LoadModel("llama-70b");
  const Workload w = LoadWorkload("text");
  const Batch batch = DrawBatch(w, 0);
  const auto ctx = Context(model, cluster, w, batch);
  MosaicOptions paper;
  paper.max_tp = 1;
  try {
    SolveMosaic(ctx, paper);
    ADD_FAILURE() << "a DP-only mapping of llama3-8b on 80 GB GPUs";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs"), std::string::npos) << e.what();
  }
  const MosaicSolution sol = SolveMosaic(ctx, MosaicOptions{});
  EXPECT_GT(sol.tp, 1);
  EXPECT_EQ(sol.plan.group_gpus, sol.tp);
  for (const auto& u : sol.plan.units) EXPECT_EQ(u.tp, sol.tp);
  for (const auto& v : PlanViolations(sol.plan, model, cluster, w)) ADD_FAILURE() << v;
}

// Issue 44: Megatron-LM's winning plan on Qwen3-VL-8B over 32 H100s is every
// module data parallel on every GPU, and that plan is in Mosaic's space (one
// unit per module, one phase each). It simulated 0.343 s in Mosaic's form
// against 0.286 s as one unit: each module's unit sends its input gradient
// after its last backward, and the LLM's gradient all-reduce queued behind
// that send could not overlap the backward. With the collectives on their own
// stream Mosaic plans 0.256 s; never slower than the paper's Megatron-LM.
// The simulated iteration time of `strategy`'s plan for 32 mosaic-fixed samples.
double PlannedTime32(const Model& model, const Cluster& cluster, const char* strategy) {
  Workload w = LoadWorkload("mosaic-fixed");
  w.global_batch = 32;
  const Batch batch = DrawBatch(w, 0);
  const Plan plan = RunStrategy(strategy, Context(model, cluster, w, batch)).plan;
  return RunPlan(model, cluster, w, plan, batch).result.iteration_time_s;
}

TEST(MosaicStrategy, NoSlowerThanMegatronDpWhereDataParallelWins) {
  Cluster cluster = LoadCluster("mosaic-testbed");
  ApplyCostModel(cluster, "default");
  const Model model = LoadModel("qwen3-vl-8b");
  EXPECT_LT(PlannedTime32(model, cluster, "mosaic"), PlannedTime32(model, cluster, "megatron-dp"));
}

// The shipped H100 profile with SM time exactly proportional to 1 / SMs (no
// serial share, no launch floor): the "linear" profile of the fourth part of
// scripts/mosaic-results.sh.
void ApplyLinearSmLaw(Cluster& cluster) {
  ApplyCostModel(cluster, "default");
  const auto* shipped = dynamic_cast<const ProfiledCostModel*>(cluster.cost_model.get());
  ASSERT_NE(shipped, nullptr);
  Profile linear = shipped->profile();
  linear.sm_sharing.serial_fraction = 0;
  linear.sm_sharing.launch_floor_s_per_layer = 0;
  cluster.cost_model = std::make_shared<const ProfiledCostModel>(std::move(linear));
}

// Spindle's mappings (whole GPUs, a in {0, 1}) are in Mosaic's space, yet on
// OFASys over 32 H100s with SM time proportional to 1 / SMs Mosaic simulated
// 54.5 ms against Spindle's 53.3 ms (0.978x; OFASys-10 0.994x). GAHC found
// the best partition of its own objective (Eq. 1: stage times summed, each
// module's gradient all-reduce counted whole in its stage), which rates
// vision d16 73%, text d16 79%, audio d16 18% | llm about 0.9 ms above
// Spindle's vision d16, text d16 | audio d32 | llm: there audio's all-reduce
// (2 ms) is a stage's time of its own, where the simulator overlaps it with
// the backwards after it. Spindle's mappings now go to the simulator too.
TEST(MosaicStrategy, NoSlowerThanSpindleWhoseMappingsAreInItsSpace) {
  Cluster cluster = LoadCluster("mosaic-testbed");
  ASSERT_NO_FATAL_FAILURE(ApplyLinearSmLaw(cluster));
  for (const std::string& name : {std::string("ofasys"), std::string(LOOM_EXAMPLES) + "/mosaic/ofasys-10.yaml"}) {
    SCOPED_TRACE(name);
    const Model model = LoadModel(name);
    EXPECT_LE(PlannedTime32(model, cluster, "mosaic"), PlannedTime32(model, cluster, "spindle"));
  }
}

// The baselines Mosaic is measured against: the paper's Megatron-LM (every
// module data parallel on all GPUs) and DistMM giving an encoder-only model's
// towers disjoint GPU sets side by side, with no backbone wave after them.
TEST(MosaicBaselines, MegatronDpAndDistMmOnAnEncoderOnlyModel) {
  Cluster cluster = MakeCluster("h100", 1, 8);
  ApplyCostModel(cluster, "default");
  const Model model = LoadModel("clip-vit-l");
  Workload w = LoadWorkload("mosaic-fixed");
  w.global_batch = 16;
  const Batch batch = DrawBatch(w, 0);
  const auto ctx = Context(model, cluster, w, batch);
  const Plan dp = RunStrategy("megatron-dp", ctx).plan;
  ASSERT_EQ(dp.units.size(), 1u);
  EXPECT_EQ(dp.units[0].tp, 1);
  EXPECT_EQ(dp.units[0].num_replicas(), 8);
  EXPECT_EQ(dp.units[0].pipelines[0].pp, 1);
  const Plan distmm = RunStrategy("distmm", ctx).plan;
  ASSERT_EQ(distmm.units.size(), 2u);  // vision and text, no backbone unit
  std::set<int> groups;
  for (const auto& u : distmm.units) {
    EXPECT_EQ(u.phase, 0);
    ASSERT_EQ(u.modules.size(), 1u);
    for (int g = u.first_group; g < u.first_group + u.num_groups(); ++g) EXPECT_TRUE(groups.insert(g).second);
  }
  for (const auto& v : PlanViolations(distmm, model, cluster, w)) ADD_FAILURE() << v;
}

// The solver prices what the simulator runs: for one-module models (no
// co-location), Mosaic's stage time of every mapping it hands on (each slot
// size, each microbatch count) against the simulated iteration of the plan
// built from it, within 15% (the surfaces leave out the optimizer step and
// how the simulator overlaps the gradient all-reduce with the backward;
// measured: 9-11% at most, vit-huge and llama3-8b on slots of one GPU). The
// orders can differ (llama3-8b: the solver ranks TP 2 first, the simulator
// TP 1), which is why the strategy keeps the fastest simulated mapping.
TEST(MosaicStrategy, SolverStageTimesMatchTheSimulatedPlan) {
  Cluster cluster = MakeCluster("h100", 1, 8);
  ApplyCostModel(cluster, "default");
  for (const char* name : {"llama3-1b", "vit-huge", "llama3-8b"}) {
    SCOPED_TRACE(name);
    const Model model = LoadModel(name);
    Workload w = LoadWorkload("mosaic-fixed");
    w.global_batch = 16;
    const Batch batch = DrawBatch(w, 0);
    const auto ctx = Context(model, cluster, w, batch);
    double fastest_s = 1e300;
    for (const MosaicSolution& sol : SolveMosaicSlots(ctx, MosaicOptions{})) {
      const PlanRun run = RunPlan(model, cluster, w, sol.plan, batch);
      const double sim_s = run.result.iteration_time_s;
      EXPECT_NEAR(sol.mapping.time_s / sim_s, 1.0, 0.15) << "tp " << sol.tp << " m " << sol.microbatches;
      if (run.memory_violations.empty()) fastest_s = std::min(fastest_s, sim_s);
    }
    const Plan best = RunStrategy("mosaic", ctx).plan;
    EXPECT_NEAR(RunPlan(model, cluster, w, best, batch).result.iteration_time_s, fastest_s, 1e-12);
  }
}

// Cross-stage memory (mapping_memory.h), worked by hand: module 1 reads
// module 0, so they are two stages on the same 2 slots. Each is fastest on
// both slots (1 s, 45 GB per slot); module 0 also runs on one slot (2 s,
// 30 GB). GAHC without the reserve puts both on both slots: 45 + 45 = 90 GB
// per slot, over 80. Re-solving stage 0 against stage 1's 45 GB leaves it
// 35 GB: module 0 on one slot, peaks 75 and 45 GB, 3 s in all.
TEST(MosaicMemory, StagesAreResolvedAgainstTheMemoryTheOthersKeep) {
  std::vector<ModuleSurface> s(2);
  for (int m = 0; m < 2; ++m) {
    s[m].module = "m" + std::to_string(m);
    s[m].index = m;
    //          dp sms  latency floor mem   bw held
    s[m].points.push_back({2, 132, 1.0, 0, 45e9, 0, 45e9});
  }
  s[0].points.insert(s[0].points.begin(), SurfacePoint{1, 132, 2.0, 0, 30e9, 0, 30e9});
  const std::vector<std::vector<int>> deps{{}, {0}};
  StageEvaluator eval(s, 2, 80e9, SmPartitionRules{}, SmSharing{});
  eval.ReserveOthers(false);
  Mapping mapping = SolveGahc(deps, eval);
  ASSERT_EQ(mapping.stages.size(), 2u);
  EXPECT_DOUBLE_EQ(mapping.time_s, 2.0);
  EXPECT_EQ(MappingPeakBytes(mapping, s, 2), (std::vector<double>{90e9, 90e9}));
  EXPECT_FALSE(MappingFits(mapping, s, 2, 80e9));
  EXPECT_TRUE(FitMappingMemory(&mapping, eval, s, 2, 80e9));
  EXPECT_EQ(MappingPeakBytes(mapping, s, 2), (std::vector<double>{75e9, 45e9}));
  EXPECT_DOUBLE_EQ(mapping.time_s, 3.0);
  EXPECT_EQ(mapping.stages[0].result.placements[0].dp, 1);
  // A stage before the last keeps its held (GPipe) activations: 50 GB held
  // by module 0 on one slot cannot sit beside module 1's 45 GB.
  s[0].points[0].held_mem_bytes = 50e9;
  Mapping again = SolveGahc(deps, eval);
  EXPECT_FALSE(FitMappingMemory(&again, eval, s, 2, 80e9));
}

// Models too big for any slot of a node (gpt-175b's 175B parameters: 2.8 TB
// of training state) get slots of several nodes, each module pipelined over
// them; a vision-heavy VLM on 4 nodes (vlm-l: ViT-22B over ~50K image tokens
// per sample) needs phase rounds too, or its encoder would keep the whole
// batch's activations until its backward. Each plan validates, fits in the
// simulator, and the solver's exact peak is within 8% of the simulated one
// (measured: 5-6% under on gpt-175b's slots of 8 and 16 nodes, the
// pipeline's stages as the plan balances them; the simulator judges).
TEST(MosaicStrategy, ModulesTooBigForANodeArePipelinedOverNodes) {
  struct Case {
    const char* model;
    int nodes;
  };
  for (const Case& c : {Case{"gpt-175b", 16}, Case{"vlm-l", 4}}) {
    SCOPED_TRACE(c.model);
    Cluster cluster = MakeCluster("h100", c.nodes, 8);
    const Model model = LoadModel(c.model);
    const Workload w = DefaultWorkload(model);
    const Batch batch = DrawBatch(w, 0);
    const auto ctx = Context(model, cluster, w, batch);
    const StrategyResult r = RunStrategy("mosaic", ctx);
    for (const auto& v : PlanViolations(r.plan, model, cluster, w)) ADD_FAILURE() << v;
    int max_pp = 1;
    for (const auto& u : r.plan.units) max_pp = std::max(max_pp, u.pipelines[0].pp);
    EXPECT_GT(max_pp, 1);
    EXPECT_EQ(r.plan.group_gpus, 8);
    if (r.plan.units.size() > 1) EXPECT_GT(r.plan.phase_rounds, 1);
    const PlanRun run = RunPlan(model, cluster, w, r.plan, batch);
    EXPECT_TRUE(run.memory_violations.empty());
    for (const MosaicSolution& sol : SolveMosaicSlots(ctx, MosaicOptions{})) {
      const auto peaks = MappingPeakBytes(sol.mapping, sol.surfaces, cluster.num_gpus() / (sol.tp * sol.pp));
      const double solver = *std::max_element(peaks.begin(), peaks.end());
      const PlanRun sim = RunPlan(model, cluster, w, sol.plan, batch);
      const double simulated = *std::max_element(sim.group_peak_mem_bytes.begin(), sim.group_peak_mem_bytes.end());
      EXPECT_NEAR(solver / simulated, 1.0, 0.08) << "tp " << sol.tp << " pp " << sol.pp << " m " << sol.microbatches;
    }
  }
}

}  // namespace
}  // namespace loom
