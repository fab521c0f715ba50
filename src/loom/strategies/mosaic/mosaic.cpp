#include "loom/strategies/mosaic/mosaic.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <tuple>

#include "loom/cost/cost_model.h"
#include "loom/error.h"
#include "loom/human_bytes.h"
#include "loom/strategies/mosaic/mapping_memory.h"
#include "loom/strategies/plan_builders.h"
#include "loom/strategies/search/candidate_search.h"
#include "loom/strategies/search/pipeline_grid.h"

namespace loom {

using namespace mosaic;

namespace {

// The surfaces' whole-GPU points: each module's options with a in {0, 1}
// (Mosaic §3.1), the space of Spindle's and DistMM's mappings. Point for
// point what SampleSurfaces gives with SurfaceOptions::whole_gpus (a point's
// price does not depend on which other quotas are sampled), so GAHC on them
// finds the mapping the `spindle` strategy's search finds.
std::vector<ModuleSurface> WholeGpuPoints(std::vector<ModuleSurface> surfaces, int sm_count) {
  for (auto& s : surfaces) std::erase_if(s.points, [&](const SurfacePoint& p) { return p.sms != sm_count; });
  return surfaces;
}

// Whether two mappings of one configuration place every module alike (stages,
// degree, pipeline, SMs, GPUs): then BuildPlan makes the same plan of both.
bool SameMappingAs(const Mapping& a, const Mapping& b) {
  if (a.stages.size() != b.stages.size()) return false;
  auto placed = [](const std::vector<Placement>& ps) {
    std::vector<std::tuple<int, int, int, int, int>> k;
    for (const auto& p : ps) k.emplace_back(p.module, p.dp, p.pp, p.sms, p.first_gpu);
    std::sort(k.begin(), k.end());
    return k;
  };
  for (size_t s = 0; s < a.stages.size(); ++s) {
    if (a.stages[s].modules != b.stages[s].modules ||
        placed(a.stages[s].result.placements) != placed(b.stages[s].result.placements)) {
      return false;
    }
  }
  return true;
}

// Mosaic's search with every module on slots of tp x pp GPUs: per
// recomputation level (none, selective, full: each costs time, but can buy
// larger DP degrees or fewer microbatches, so each is a candidate), the
// fewest microbatches (gradient accumulation, the same for every module as
// the plan format needs; the paper runs one), then the fewest phase rounds
// (Plan::phase_rounds; with pp = 1 every microbatch is a round: an earlier
// stage then keeps one microbatch's activations, at no cost in time), under
// which every module fits some slot block and a
// mapping's exact cross-stage peak fits (mapping_memory.h; GAHC with the
// other modules' reserve, StageEvaluator::ReserveOthers, else without it,
// then stages re-solved against each other). Returns up to kPerLevel
// mappings per recomputation level, the fewest microbatches first (the
// simulator judges them), and sets `why` when none fits.
//
// With options.whole_gpu_candidates (and not whole_gpus) the same walk also
// runs GAHC on the whole-GPU points alone (WholeGpuPoints), with Spindle's
// evaluator and mapping options and counters of its own, at the first
// recomputation level where that finds mappings: Spindle's mappings of
// these slots, returned as well (MosaicSolution::whole_gpus_only) unless one
// is GAHC's own mapping of the same configuration. They are in Mosaic's
// space, but GAHC's objective (Eq. 1: stage times summed, each module's
// gradient all-reduce counted whole inside its stage) can rank a co-located
// stage above them where the simulator, which overlaps the all-reduce with
// the backwards that follow, ranks them first (OFASys on 32 H100s with SM
// time proportional to 1 / SMs; docs/results/mosaic.md); the simulator
// judges both.
constexpr int kPerLevel = 3;
std::vector<MosaicSolution> SolveAtSlot(const StrategyContext& ctx, const MosaicOptions& options,
                                        const std::vector<TokenStats>& batch_tokens, int tp, int pp, std::string& why) {
  std::vector<MosaicSolution> found;
  SurfaceOptions so;
  so.granularity = options.granularity;
  so.whole_gpus = options.whole_gpus;
  so.tp = tp;
  so.pp = pp;
  const double mem = ctx.cluster.usable_mem_bytes() * options.mem_fraction;
  const SmPartitionRules rules = PartitionRules(ctx.cluster);
  const SmSharing sharing = ctx.cluster.cost_model ? ctx.cluster.cost_model->sm_sharing() : SmSharing{};
  const auto deps = ModuleDeps(ctx.model);
  const int slots = ctx.cluster.num_gpus() / (tp * pp);  // whole slots; the rest idle
  const int64_t batch = std::max<int64_t>(1, static_cast<int64_t>(ctx.representative.samples.size()));
  // Side 0: GAHC on every point (Mosaic's own; Spindle's with whole_gpus).
  // Side 1: GAHC on the whole-GPU points only (Spindle's, as candidates).
  struct Side {
    bool done = false;        // kPerLevel mappings at this recomputation level
    bool found_at_m = false;  // a mapping at this microbatch count: more rounds only add fills
    int per_level = 0;
    int evaluations = 0, milp_solves = 0;  // since its last mapping
  };
  Side side[2];
  bool whole_side = options.whole_gpu_candidates && !options.whole_gpus;
  for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
    side[0].done = false;
    side[0].per_level = 0;
    side[1].done = !whole_side;
    side[1].per_level = 0;
    for (int m = pp; m <= batch && !(side[0].done && side[1].done); m *= 2) {
      if (ctx.workload.global_batch % m != 0) continue;
      for (Side& s : side) s.found_at_m = s.done;
      for (int k = pp == 1 ? m : 1; k * pp <= m && !(side[0].found_at_m && side[1].found_at_m); k *= 2) {
        so.recompute = r;
        so.microbatches = m;
        so.rounds = k;
        const std::vector<ModuleSurface> surfaces = SampleSurfaces(ctx, so, batch_tokens);
        std::string too_big;
        for (const auto& s : surfaces) {
          double least = 1e300;
          for (const auto& p : s.points) least = std::min(least, p.mem_bytes);
          if (least > mem && too_big.empty()) {
            too_big = fmt::format(
                "module {} needs {} per GPU even with TP {}{}, DP over the rest of the {} GPUs, "
                "{} microbatches in {} rounds, more than the {} of a {}",
                s.module, s.points.empty() ? std::string("more") : HumanBytes(least), tp,
                pp > 1 ? fmt::format(" x PP {}", pp) : "", ctx.cluster.num_gpus(), m, k, HumanBytes(mem),
                ctx.cluster.gpu.name);
          }
        }
        if (!too_big.empty()) {
          why = too_big;
          continue;
        }
        int own = -1;  // side 0's mapping of this (m, k) in `found`
        for (int i = 0; i < 2; ++i) {
          Side& s = side[i];
          if (s.found_at_m) continue;
          MosaicSolution sol;
          sol.surfaces = i == 0 ? surfaces : WholeGpuPoints(surfaces, rules.sm_count);
          sol.recompute = r;
          sol.microbatches = m;
          sol.rounds = k;
          sol.whole_gpus_only = i == 1;
          bool fits = false;
          for (bool reserve : {true, false}) {
            StageEvaluator eval(sol.surfaces, slots, mem, rules, sharing, i == 0 ? options.stage : StageEvalOptions{});
            eval.ReserveOthers(reserve);
            sol.mapping = SolveGahc(deps, eval, i == 0 ? options.mapping : MappingOptions{});
            fits = FitMappingMemory(&sol.mapping, eval, sol.surfaces, slots, mem);
            s.evaluations += eval.evaluations();
            s.milp_solves += eval.milp_solves();
            if (fits) break;
          }
          if (!fits) {
            if (i == 0) {
              why = fmt::format(
                  "no stage mapping fits {} at TP {}{}: every module keeps its state on each GPU it uses "
                  "for the whole iteration (and the activations of every stage but the last until its "
                  "backward), even with full recomputation, {} microbatches and {} rounds",
                  ctx.cluster.name, tp, pp > 1 ? fmt::format(" x PP {}", pp) : "", m, k);
            }
            continue;
          }
          // More rounds only add pipeline fills; more microbatches can still
          // win (a shorter pipeline fill per microbatch, a layout the
          // simulator fits where the fewer did not quite): a few per level.
          s.found_at_m = true;
          s.done = ++s.per_level == kPerLevel;
          // Spindle's mapping is GAHC's own here: one plan, one candidate.
          if (i == 1 && own >= 0 && SameMappingAs(found[own].mapping, sol.mapping)) continue;
          sol.evaluations = s.evaluations;
          sol.milp_solves = s.milp_solves;
          s.evaluations = s.milp_solves = 0;
          if (i == 0) own = static_cast<int>(found.size());
          found.push_back(std::move(sol));
        }
      }
    }
    // Spindle's mappings at the first level that has them: later levels only
    // buy memory with time, and GAHC's own mappings cover them.
    if (side[1].per_level > 0) whole_side = false;
  }
  return found;
}

}  // namespace

namespace {

// The plan of a mapping: one unit per module, its stage the unit's phase.
Plan BuildPlan(const StrategyContext& ctx, const MosaicOptions& options, const MosaicSolution& sol) {
  const SmPartitionRules rules = PartitionRules(ctx.cluster);
  Plan plan = EmptyPlan(ctx, options.whole_gpus ? "spindle" : "mosaic", sol.tp);
  // Rounds repeat several stages; one stage runs its microbatches once.
  plan.phase_rounds = sol.mapping.stages.size() > 1 ? sol.rounds : 1;
  for (int phase = 0; phase < static_cast<int>(sol.mapping.stages.size()); ++phase) {
    for (const auto& p : sol.mapping.stages[phase].result.placements) {
      const std::string& name = ctx.model.modules[p.module].name;
      // A slot is sol.pp groups: the module pipelined over them or data
      // parallel over (the first of) them, as its option says.
      const SurfacePoint& sp = sol.surfaces[p.module].At(p.dp, p.pp, p.sms);
      // Several microbatches: the last stage's modules run forward then
      // backward each (1F1B on one stage); earlier stages keep every
      // microbatch until their backward after the later stages (GPipe).
      const int m = sol.microbatches;
      const bool last = phase + 1 == static_cast<int>(sol.mapping.stages.size());
      Unit u = MakeUnit(ctx, name, {name}, p.first_gpu * sol.pp, sol.tp, phase, sp.replicas, sp.pp, m,
                        m > 1 && last ? ScheduleKind::kOneFOneB : ScheduleKind::kGpipe, sol.recompute, Balance::kTime);
      u.sm_fraction = static_cast<double>(p.sms) / rules.sm_count;
      plan.units.push_back(std::move(u));
    }
  }
  // Units in model order (the plan format lists modules' units as the model does).
  std::stable_sort(plan.units.begin(), plan.units.end(), [&](const Unit& a, const Unit& b) {
    return ctx.model.FindModule(a.modules[0]) < ctx.model.FindModule(b.modules[0]);
  });
  return plan;
}

}  // namespace

std::vector<MosaicSolution> SolveMosaicSlots(const StrategyContext& ctx, const MosaicOptions& options) {
  // The paper places modules on whole GPUs with DP only (edge-grade models,
  // §3.5): slots of one GPU. Loom adds slots of 2, 4 and 8 GPUs of a node,
  // every module TP-sharded over its slot, for modules too big for one GPU or
  // faster split; the solver is unchanged on the slots.
  std::vector<MosaicSolution> out;
  std::string why;
  const int max_tp = options.max_tp > 0 ? options.max_tp : ctx.cluster.gpus_per_node;
  const std::vector<TokenStats> batch_tokens = CountModuleTokens(ctx.model, ctx.representative.samples);
  auto solve = [&](int tp, int pp) {
    std::string reason;
    std::vector<MosaicSolution> found = SolveAtSlot(ctx, options, batch_tokens, tp, pp, reason);
    if (found.empty()) why = reason;  // the largest slot tried says most
    for (MosaicSolution& sol : found) {
      sol.tp = tp;
      sol.pp = pp;
      sol.plan = BuildPlan(ctx, options, sol);
      out.push_back(std::move(sol));
    }
  };
  for (int tp = 1; tp <= max_tp && tp <= ctx.cluster.num_gpus(); tp *= 2) {
    if (ctx.cluster.gpus_per_node % tp == 0) solve(tp, 1);
  }
  // Slots of pp nodes (powers of two and divisors of the node count; nodes
  // past the last whole slot stay idle), a module pipelined over them (its
  // stages on different nodes, TP inside each) or data parallel over their
  // groups: what modules too big for a node need, and faster for large ones
  // that fit a node only with many microbatches (t2v-xl on 128 H100s: 14.4 s
  // against 25.5 s; docs/results/mosaic.md).
  const int node = ctx.cluster.gpus_per_node, nodes = ctx.cluster.nodes;
  std::set<int> pps;
  for (int pp = 2; pp <= nodes; pp *= 2) pps.insert(pp);
  for (int pp : Divisors(nodes)) {
    if (pp > 1) pps.insert(pp);
  }
  if (max_tp >= node) {
    for (int pp : pps) solve(node, pp);
  }
  if (out.empty()) throw Error(fmt::format("strategy {}: {}", options.whole_gpus ? "spindle" : "mosaic", why));
  // What the whole search did, on every plan it returns (GAHC's own mappings;
  // Spindle's, the whole-GPU candidates, counted apart).
  int mappings = 0, evaluations = 0, milp = 0, pairs = 0, pruned = 0, refinements = 0;
  int whole_mappings = 0, whole_evaluations = 0;
  for (const auto& sol : out) {
    if (sol.whole_gpus_only) {
      ++whole_mappings;
      whole_evaluations += sol.evaluations;
      continue;
    }
    ++mappings;
    evaluations += sol.evaluations;
    milp += sol.milp_solves;
    pairs += sol.mapping.pairs_visited;
    pruned += sol.mapping.pruned;
    refinements += sol.mapping.refinements;
  }
  std::string searched = fmt::format(
      "GAHC over stages (Alg. 1), StageEval by binary search + first fit / CBC ({}, aligned GPU blocks, memory, host "
      "launch floors), slots of 1-{} GPUs (TP){}, every stage against the others' memory; {} mappings; {} stage "
      "evaluations, {} CBC solves, {} pairs, {} pruned, {} refinements",
      options.whole_gpus ? std::string("whole GPUs: waves of modules on disjoint GPU sets")
                         : fmt::format("SM quotas at {:.0f}% granularity", options.granularity * 100),
      max_tp, out.front().pp > 1 ? fmt::format(" x {} nodes (PP)", out.front().pp) : "", mappings, evaluations, milp,
      pairs, pruned, refinements);
  if (options.whole_gpu_candidates && !options.whole_gpus) {
    searched += fmt::format("; beside them {} of Spindle's whole-GPU mappings for the simulator ({} stage evaluations)",
                            whole_mappings, whole_evaluations);
  }
  for (auto& sol : out) sol.plan.searched = searched;
  // Fastest mapping first; a tie keeps the smaller slot (the paper's).
  std::stable_sort(out.begin(), out.end(), [](const MosaicSolution& a, const MosaicSolution& b) {
    return a.mapping.time_s < b.mapping.time_s * (1 - 1e-9);
  });
  return out;
}

MosaicSolution SolveMosaic(const StrategyContext& ctx, const MosaicOptions& options) {
  return SolveMosaicSlots(ctx, options).front();
}

namespace {

std::string DescribeMosaicPlan(const Plan& p) {
  std::string s;
  int phase = -1;
  for (int q = 0;; ++q) {
    std::string part;
    for (const auto& u : p.units) {
      if (u.phase != q) continue;
      const int pp = u.pipelines.empty() ? 1 : u.pipelines[0].pp;
      part += fmt::format("{}{}{}{} d{} {:.0f}%", part.empty() ? "" : ", ", u.name,
                          u.tp > 1 ? fmt::format(" tp{}", u.tp) : "", pp > 1 ? fmt::format(" pp{}", pp) : "",
                          u.num_replicas(), u.sm_fraction * 100);
    }
    if (part.empty()) break;
    s += (phase < 0 ? "" : " | ") + part;
    phase = q;
  }
  return s;
}

StrategyResult Run(const StrategyContext& ctx, const MosaicOptions& options, const std::string& name) {
  // Every slot size's mapping goes to the simulator, which judges real peaks
  // and keeps the fastest. The surfaces price an even split of the
  // representative batch; the simulator's peak is its largest microbatch's,
  // a few percent more: when every mapping overflows, the solver runs again
  // on 95%, then 90% and 80% of each GPU's memory.
  CandidateSearch search(ctx, name);
  std::string searched;
  for (double fraction : {1.0, 0.95, 0.9, 0.8}) {
    MosaicOptions o = options;
    o.mem_fraction = fraction;
    std::vector<MosaicSolution> solutions;
    try {
      solutions = SolveMosaicSlots(ctx, o);
    } catch (const Error&) {
      if (fraction == 1.0) throw;  // nothing fits even the whole GPU: its reason
      break;
    }
    if (searched.empty()) searched = solutions.front().plan.searched;
    // GAHC's own mappings first, then Spindle's (whole GPUs only): among
    // equal simulated times the first tried is kept, so Spindle's mapping
    // replaces GAHC's only where it simulates strictly faster.
    for (bool whole : {false, true}) {
      for (const MosaicSolution& sol : solutions) {
        if (sol.whole_gpus_only != whole) continue;
        search.Try([&](Recompute r) {
          Plan p = sol.plan;
          p.strategy = name;
          for (auto& u : p.units) u.recompute = std::max(r, sol.recompute);
          return p;
        });
      }
    }
    if (search.feasible() > 0) {
      if (fraction < 1.0) searched += fmt::format(" (solved on {:.0f}% of each GPU's memory)", fraction * 100);
      break;
    }
  }
  return search.Finish(searched, DescribeMosaicPlan);
}

}  // namespace

StrategyResult MosaicStrategy(const StrategyContext& ctx) { return Run(ctx, {}, "mosaic"); }

// The §5.3 ablations and Spindle: Mosaic's options with one thing changed.
static MosaicOptions With(void (*change)(MosaicOptions&)) {
  MosaicOptions o;
  change(o);
  return o;
}

StrategyResult MosaicNoInterferenceStrategy(const StrategyContext& ctx) {
  return Run(ctx, With([](MosaicOptions& o) { o.stage.interference = false; }), "mosaic-nointerference");
}
StrategyResult MosaicAdditiveStrategy(const StrategyContext& ctx) {
  return Run(ctx, With([](MosaicOptions& o) { o.stage.additive_only = true; }), "mosaic-additive");
}
StrategyResult MosaicNoCacheStrategy(const StrategyContext& ctx) {
  return Run(ctx, With([](MosaicOptions& o) { o.stage.cache = false; }), "mosaic-nocache");
}
StrategyResult MosaicNoPruneStrategy(const StrategyContext& ctx) {
  return Run(ctx, With([](MosaicOptions& o) { o.mapping.early_prune = false; }), "mosaic-noprune");
}
StrategyResult MosaicGranularity30Strategy(const StrategyContext& ctx) {
  return Run(ctx, With([](MosaicOptions& o) { o.granularity = 0.3; }), "mosaic-g30");
}
StrategyResult MosaicGranularity20Strategy(const StrategyContext& ctx) {
  return Run(ctx, With([](MosaicOptions& o) { o.granularity = 0.2; }), "mosaic-g20");
}
StrategyResult MosaicGranularity5Strategy(const StrategyContext& ctx) {
  return Run(ctx, With([](MosaicOptions& o) { o.granularity = 0.05; }), "mosaic-g5");
}
StrategyResult SpindleStrategy(const StrategyContext& ctx) {
  return Run(ctx, With([](MosaicOptions& o) { o.whole_gpus = true; }), "spindle");
}

}  // namespace loom
