// Plan shapes 2-4 (MMScale, DistMM, Optimus, Oobleck): several units, or one
// unit with several pipeline templates. Every replica of every unit becomes
// its own ranks (one per GPU group and unit) in one schedule over a stage DAG,
// joined
//   - inside a replica by the chain of its stages,
//   - across units by broker edges from each producing replica to the
//     consuming replicas that share its samples (MMScale §4.1),
//   - across temporal phases on shared groups by barriers (the later phase's
//     first forward waits for the earlier phase's last forward, and the
//     earlier phase's first backward for the later phase's last backward),
//   - across replicas by layer-wise gradient sync (Oobleck's heterogeneous
//     templates sync each layer once every copy of it finished).
// Chained units of one phase run as one 1F1B pipeline: each unit takes its
// ranks' compute order from a template as deep as the whole chain (MMScale's
// warm-up counts by position in the whole pipeline).
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <unordered_map>

#include "loom/error.h"
#include "loom/pipeline/schedules.h"
#include "loom/pipeline/validate.h"
#include "loom/plan/compile_shapes.h"
#include "loom/plan/validate_plan.h"

namespace loom {

namespace {

// Per unit: its flattened layer list and, per template, the stage of each layer.
struct UnitLayout {
  std::vector<std::pair<int, int>> layers;             // (module, layer)
  std::vector<std::vector<int>> stage_of;              // [template][flat layer] -> template stage
  std::vector<int> replica_base;                       // [template] -> first flattened replica
  std::vector<int> submb_count;                        // per global microbatch (uniform plans)
  std::vector<std::vector<std::vector<int>>> samples;  // [replica][unit microbatch] -> sample indices
  int microbatches = 0;                                // per replica, after sub-microbatching (uniform plans)
  std::vector<int> replica_microbatches;               // [replica] -> its microbatch count (uniform plans)
  int template_of(int replica) const {
    int t = 0;
    while (t + 1 < static_cast<int>(replica_base.size()) && replica_base[t + 1] <= replica) ++t;
    return t;
  }
};

UnitLayout LayoutOf(const Model& model, const Plan& plan, const Unit& unit, const IterationSchedule* it,
                    const std::vector<std::vector<int>>& global_mbs, bool uniform, int only) {
  UnitLayout L;
  for (const auto& name : unit.modules) {
    const int mi = model.FindModule(name);
    for (int l = 0; l < static_cast<int>(model.modules[mi].layers.size()); ++l) L.layers.push_back({mi, l});
  }
  int base = 0;
  for (const auto& p : unit.pipelines) {
    L.replica_base.push_back(base);
    base += p.replicas;
    std::vector<int> stage_of;
    for (int s = 0; s < static_cast<int>(p.stages.size()); ++s) {
      for (const auto& r : p.stages[s].layers) stage_of.insert(stage_of.end(), r.end - r.begin, s);
    }
    L.stage_of.push_back(std::move(stage_of));  // validated: stages hold the layers in order
  }
  const int D = unit.num_replicas();
  L.samples.assign(D, {});
  if (uniform && it != nullptr && it->replica_microbatch_samples.count(unit.name)) {
    // Each replica's own microbatches (Entrain's DP-level and stratified assignment).
    L.samples = it->replica_microbatch_samples.at(unit.name);
    for (const auto& mbs : L.samples) {
      L.replica_microbatches.push_back(static_cast<int>(mbs.size()));
      L.microbatches = std::max(L.microbatches, static_cast<int>(mbs.size()));
    }
  } else if (uniform) {
    // The unit's own regrouping of the samples (Entrain), else the global microbatches.
    const auto& mbs = it != nullptr && it->unit_microbatch_samples.count(unit.name)
                          ? it->unit_microbatch_samples.at(unit.name)
                          : global_mbs;
    const int m = static_cast<int>(mbs.size());
    std::vector<int> subs(m, 1);
    if (it != nullptr && it->sub_microbatches.count(unit.name)) subs = it->sub_microbatches.at(unit.name);
    for (int k = 0; k < m; ++k) {
      if (only >= 0) {  // one replica's contents are compiled: its slice alone
        for (auto& sub : SplitEven(SplitEvenPart(mbs[k], D, only), subs[k])) L.samples[only].push_back(std::move(sub));
        continue;
      }
      auto slices = SplitEven(mbs[k], D);
      for (int d = 0; d < D; ++d) {
        for (auto& sub : SplitEven(slices[d], subs[k])) L.samples[d].push_back(std::move(sub));
      }
    }
    L.submb_count = subs;
    L.microbatches = std::accumulate(subs.begin(), subs.end(), 0);
    L.replica_microbatches.assign(D, L.microbatches);
  } else {  // one unit, templates with different microbatch counts: replica-major slots
    int slots = 0;
    for (const auto& p : unit.pipelines) slots += p.replicas * p.microbatches;
    const int per = static_cast<int>(plan.global_batch / slots);
    int next = 0;
    for (size_t t = 0; t < unit.pipelines.size(); ++t) {
      for (int j = 0; j < unit.pipelines[t].replicas; ++j) {
        for (int k = 0; k < unit.pipelines[t].microbatches; ++k, ++next) {
          L.samples[L.replica_base[t] + j].push_back(Range(next * per, (next + 1) * per));
        }
      }
    }
  }
  return L;
}

// Flat index of a module's first (or last) layer in a unit's layer list.
int FlatIndex(const UnitLayout& L, int module, bool last) {
  int idx = -1;
  for (size_t i = 0; i < L.layers.size(); ++i) {
    if (L.layers[i].first == module && (idx < 0 || last)) idx = static_cast<int>(i);
  }
  return idx;
}

// Many-to-many edges from unit u's replicas to unit v's, by shared samples.
void AddSharedSampleEdges(const Model& model, const Plan& plan, const UnitLayout& Lu, const UnitLayout& Lv, int u,
                          int v, const std::vector<std::vector<std::vector<int>>>& stage_id, Schedule& sch) {
  for (const auto& cname : plan.units[v].modules) {
    const int cm = model.FindModule(cname);
    for (int pm : model.modules[cm].inputs) {
      const auto& umods = plan.units[u].modules;
      if (std::find(umods.begin(), umods.end(), model.modules[pm].name) == umods.end()) continue;
      const int pl = FlatIndex(Lu, pm, true), cl = FlatIndex(Lv, cm, false);
      std::set<std::pair<int, int>> added;
      for (const auto& existing : sch.edges) added.insert({existing.from, existing.to});
      // sample -> (producer replica d, its last microbatch holding it in d), d ascending
      std::unordered_map<int, std::vector<std::pair<int, int>>> where;
      for (size_t d = 0; d < Lu.samples.size(); ++d) {
        for (size_t j = 0; j < Lu.samples[d].size(); ++j) {
          for (int x : Lu.samples[d][j]) {
            auto& at = where[x];
            if (!at.empty() && at.back().first == static_cast<int>(d)) {
              at.back().second = static_cast<int>(j);
            } else {
              at.push_back({static_cast<int>(d), static_cast<int>(j)});
            }
          }
        }
      }
      // Only replica pairs sharing samples get an edge (looked up from the
      // consumer's samples: linear in the batch, not in replicas squared).
      std::map<std::pair<int, int>, StageEdge> pairs;  // (d, e): in the order edges are added
      for (size_t e = 0; e < Lv.samples.size(); ++e) {
        const int consumers = static_cast<int>(Lv.samples[e].size());
        for (int c = 0; c < consumers; ++c) {
          for (int x : Lv.samples[e][c]) {
            auto f = where.find(x);
            if (f == where.end()) continue;
            for (const auto& [d, j] : f->second) {
              StageEdge& edge = pairs[{d, static_cast<int>(e)}];
              if (edge.producers.empty()) edge.producers.assign(consumers, {});
              edge.producers[c].push_back(j);
            }
          }
        }
      }
      for (auto& [de, edge] : pairs) {
        const auto [d, e] = de;
        for (auto& list : edge.producers) {
          std::sort(list.begin(), list.end());
          list.erase(std::unique(list.begin(), list.end()), list.end());
        }
        edge.from = stage_id[u][d][Lu.stage_of[Lu.template_of(d)][pl]];
        edge.to = stage_id[v][e][Lv.stage_of[Lv.template_of(e)][cl]];
        if (added.insert({edge.from, edge.to}).second) sch.edges.push_back(std::move(edge));
      }
    }
  }
}

}  // namespace

bool FoldableReplicas(const Plan& plan, const IterationSchedule* it) {
  if (!UniformMicrobatches(plan)) return false;
  if (it != nullptr && (!it->unit_microbatch_samples.empty() || !it->replica_microbatch_samples.empty() ||
                        !it->unit_rank_orders.empty() || !it->sub_microbatches.empty())) {
    return false;
  }
  // Units taking turns on GPU groups (temporal phases) are joined by
  // barriers between the ranks sharing a group: those must be one replica's.
  const int D = plan.units[0].num_replicas();
  std::map<int, int> owner;  // GPU group -> the replica index on it
  for (const Unit& u : plan.units) {
    if (u.pipelines.size() != 1 || u.num_replicas() != D) return false;
    const int per = u.pipelines[0].groups();
    for (int d = 0; d < D; ++d) {
      for (int g = u.first_group + d * per; g < u.first_group + (d + 1) * per; ++g) {
        if (owner.emplace(g, d).first->second != d) return false;
      }
    }
  }
  return true;
}

namespace {

// CompileUnits' steps, in the order it takes them, over the state they share:
// the units' layouts and depths, then per unit its ranks, stages and compute
// orders, then the edges between units, the gradient sync across replicas,
// and the barriers between temporal phases.
class UnitsCompiler {
 public:
  UnitsCompiler(const Model& model, const Plan& plan, const IterationSchedule* it,
                const std::vector<std::vector<int>>& global_mbs, ExecutionPlan& out, const CompileOptions& options)
      : model(model), plan(plan), it(it), out(out), sch(out.schedule) {
    uniform = UniformMicrobatches(plan);
    m = plan.units[0].pipelines[0].microbatches;
    num_units = static_cast<int>(plan.units.size());
    // Folded (FoldableReplicas): replica d of every unit feeds only replica d
    // of the next (equal shares of every microbatch) and shares GPU groups only
    // with replica d of the others, so the DAG is D copies of one replica's,
    // joined only by the gradient sync: the schedule holds replica 0's ranks
    // and the plan is `replicated`.
    fold = options.fold_replicas && FoldableReplicas(plan, it);
    only = fold ? options.only_replica : -1;  // folded: one replica's contents
    // Phase rounds (Plan::phase_rounds): each rank's order is its template's
    // for m / rounds microbatches, once per round on the next microbatches.
    rounds = plan.phase_rounds;
    if (rounds > 1 && (it != nullptr || !uniform)) {
      throw Error(
          "phase_rounds > 1 needs a plan whose pipelines all run the same microbatch count, without an "
          "iteration schedule (sub-microbatches or regrouped samples)");
    }
    for (const auto& unit : plan.units) layout.push_back(LayoutOf(model, plan, unit, it, global_mbs, uniform, only));
    inputs = UnitInputs(plan, model);
  }

  void Run() {
    PipelineDepths();
    sch.name = plan.strategy.empty() ? "plan" : plan.strategy;
    sch.num_microbatches = 0;
    out.replicated = fold;
    out.replicas.assign(fold && only < 0 ? plan.units[0].num_replicas() : 1, {});
    stage_id.assign(num_units, {});
    rank_id.assign(num_units, {});
    group_ranks.assign(out.num_groups, {});
    for (int u = 0; u < num_units; ++u) AddUnit(u);
    AddBrokerEdges();
    sch.dag = true;
    AddGradientSync();
    AddPointToPoint(sch);
    if (it != nullptr && !it->unit_rank_orders.empty()) {
      try {
        ValidateSchedule(sch);  // a batch's own orders may deadlock; generated ones cannot
      } catch (const Error& e) {
        throw Error(fmt::format("iteration schedule: unit_rank_orders: {}", e.what()));
      }
    }
    AddPhaseBarriers();
  }

 private:
  int built(int u) const { return fold ? 1 : plan.units[u].num_replicas(); }
  int max_pp(int u) const {
    int p = 0;
    for (const auto& ps : plan.units[u].pipelines) p = std::max(p, ps.pp);
    return p;
  }

  // Pipeline depth before and after each unit among same-phase chained units.
  void PipelineDepths() {
    before.assign(num_units, 0);
    after.assign(num_units, 0);
    for (int u = 0; u < num_units; ++u) {  // units are in execution order of their modules
      for (int b : inputs[u]) {
        if (plan.units[b].phase == plan.units[u].phase) before[u] = std::max(before[u], before[b] + max_pp(b));
      }
    }
    for (int u = num_units - 1; u >= 0; --u) {
      for (int v = 0; v < num_units; ++v) {
        if (std::find(inputs[v].begin(), inputs[v].end(), u) != inputs[v].end() &&
            plan.units[v].phase == plan.units[u].phase) {
          after[u] = std::max(after[u], after[v] + max_pp(v));
        }
      }
    }
  }

  // Unit u's ranks and stages, replica by replica, each rank with its compute
  // order: the batch's own (an iteration schedule's unit_rank_orders) or the
  // template's.
  void AddUnit(int u) {
    const Unit& unit = plan.units[u];
    const UnitLayout& L = layout[u];
    const int D = unit.num_replicas();
    stage_id[u].assign(D, {});
    rank_id[u].assign(D, {});
    int group = unit.first_group;
    for (size_t t = 0; t < unit.pipelines.size(); ++t) {
      const PipelineSpec& ps = unit.pipelines[t];
      const int depth = before[u] + ps.pp + after[u];
      const int replicas = fold ? 1 : ps.replicas;
      const std::vector<std::vector<std::vector<StageStep>>>* orders = nullptr;
      if (it != nullptr && it->unit_rank_orders.count(unit.name)) {
        orders = &it->unit_rank_orders.at(unit.name);
        if (static_cast<int>(orders->size()) != D) {
          throw Error(fmt::format("iteration schedule: unit_rank_orders.{}: {} replicas, the unit has {}", unit.name,
                                  orders->size(), D));
        }
      }
      Schedule tmpl;
      int tmpl_m = -1;
      for (int j = 0; j < replicas; ++j) {
        const int d = L.replica_base[t] + j;
        const int M = uniform ? L.replica_microbatches[d] : ps.microbatches;
        if (orders == nullptr && M != tmpl_m) {
          tmpl = MakeSchedule(ps.schedule, depth, M / rounds, ps.vpp(), /*p2p=*/false);  // compute order only
          tmpl_m = M;
        }
        AddRanksAndStages(u, static_cast<int>(t), j, d, M, group);
        if (orders != nullptr) {  // this batch's own order (Entrain)
          AddOwnOrders(u, d, M, ps, (*orders)[d]);
        } else {
          AddTemplateOrders(u, d, M, ps, tmpl, depth);
        }
      }
    }
    sch.num_microbatches = std::max(sch.num_microbatches, uniform ? L.microbatches : m);
  }

  // Replica d's (template t's j-th) ranks from GPU group `group` on (advanced
  // past them), and its stages with the samples of their microbatches.
  void AddRanksAndStages(int u, int t, int j, int d, int M, int& group) {
    const Unit& unit = plan.units[u];
    const PipelineSpec& ps = unit.pipelines[t];
    const UnitLayout& L = layout[u];
    for (ExecRank& er : TemplateRanks(plan, u, t, j, group, fmt::format("{} p{} r{}", unit.name, t, j))) {
      const int rank = sch.num_ranks++;
      rank_id[u][d].push_back(rank);
      for (int g = er.group; g < er.group + er.num_groups; ++g) group_ranks[g].push_back(rank);
      group = er.group + er.num_groups;
      out.ranks.push_back(std::move(er));
      sch.ranks.emplace_back();
    }
    for (int s = 0; s < static_cast<int>(ps.stages.size()); ++s) {
      const int id = sch.num_stages();
      stage_id[u][d].push_back(id);
      sch.stage_rank.push_back(rank_id[u][d][ps.stages[s].rank]);
      sch.stage_microbatches.push_back(M);
      out.stages.push_back(StageOf(model, plan, u, t, d, ps.stages[s]));
      // Folded: replica e's copy of this stage runs replica e's samples.
      for (size_t e = 0; e < out.replicas.size(); ++e) {
        const auto& samples = L.samples[!fold ? d : only >= 0 ? only : static_cast<int>(e)];
        auto& contents = out.replicas[e].emplace_back();
        contents.reserve(M);
        for (int k = 0; k < M; ++k) {
          MicrobatchWork mb;
          mb.pieces.reserve(samples[k].size());
          for (int x : samples[k]) mb.pieces.push_back({x, -1});
          contents.push_back(std::move(mb));
        }
      }
      if (s > 0) sch.edges.push_back({id - 1, id, {}});
    }
  }

  // An iteration schedule's orders for replica d (`mine`: per pipeline rank,
  // its steps), checked: each names a stage of its rank, and every (stage,
  // microbatch) runs one forward and one backward (fused, or both halves).
  void AddOwnOrders(int u, int d, int M, const PipelineSpec& ps, const std::vector<std::vector<StageStep>>& mine) {
    const Unit& unit = plan.units[u];
    const std::string f = fmt::format("iteration schedule: unit_rank_orders.{}[{}]", unit.name, d);
    if (static_cast<int>(mine.size()) != ps.pp) {
      throw Error(fmt::format("{}: {} pipeline ranks, the unit's template has {}", f, mine.size(), ps.pp));
    }
    std::vector<int> seen(4 * ps.stages.size() * M, 0);  // F, B, Bd, W per (stage, microbatch)
    for (int r = 0; r < ps.pp; ++r) {
      for (const StageStep& step : mine[r]) {
        if (step.stage < 0 || step.stage >= static_cast<int>(ps.stages.size()) || step.microbatch < 0 ||
            step.microbatch >= M || ps.stages[step.stage].rank != r) {
          throw Error(
              fmt::format("{}[{}]: step {}{}@{} names no stage of rank {} or no microbatch of the "
                          "replica's {}",
                          f, r, step.forward ? "F" : "B", step.microbatch, step.stage, r, M));
        }
        ++seen[(step.stage * M + step.microbatch) * 4 + (step.forward ? 0 : 1 + static_cast<int>(step.part))];
        sch.ranks[rank_id[u][d][r]].push_back({StepActionKind(step), stage_id[u][d][step.stage], step.microbatch});
      }
    }
    for (size_t x = 0; x < seen.size(); x += 4) {
      const bool fused = seen[x + 1] == 1 && seen[x + 2] == 0 && seen[x + 3] == 0;
      const bool split = seen[x + 1] == 0 && seen[x + 2] == 1 && seen[x + 3] == 1;
      if (seen[x] != 1 || !(fused || split)) {
        throw Error(
            fmt::format("{}: every (stage, microbatch) needs exactly one forward and one backward (fused, "
                        "or its data and weight halves)",
                        f));
      }
    }
  }

  // The template's compute order: this replica's ranks are ranks before[u] ..
  // of the template, round after round.
  void AddTemplateOrders(int u, int d, int M, const PipelineSpec& ps, const Schedule& tmpl, int depth) {
    for (int r = 0; r < ps.pp; ++r) {
      for (int round = 0; round < rounds; ++round) {
        for (const Action& a : tmpl.ranks[before[u] + r]) {
          if (!a.is_compute()) continue;
          Action b = a;
          b.microbatch += round * (M / rounds);
          // Template stage (chunk * depth + before + r) -> this pipeline's stage (chunk * pp + r).
          const int chunk = a.stage / depth;
          b.stage = stage_id[u][d][chunk * ps.pp + r];
          sch.ranks[rank_id[u][d][r]].push_back(b);
        }
      }
    }
  }

  void AddBrokerEdges() {
    // Broker edges between units: producing replica d feeds consuming replica e
    // when their shares of a global microbatch overlap. A unit that regroups the
    // samples into microbatches of its own (Entrain) gets many-to-many edges
    // instead: consumer microbatch k of replica e waits for every microbatch of
    // producer replica d that holds one of its samples.
    auto regroups = [&](int x) {
      return it != nullptr && (it->unit_microbatch_samples.count(plan.units[x].name) > 0 ||
                               it->replica_microbatch_samples.count(plan.units[x].name) > 0);
    };
    for (int v = 0; v < num_units; ++v) {
      for (int u : inputs[v]) {
        if (regroups(u) || regroups(v)) {
          AddSharedSampleEdges(model, plan, layout[u], layout[v], u, v, stage_id, sch);
          continue;
        }
        const int Du = built(u), Dv = built(v);
        const auto& su = layout[u].submb_count;
        const auto& sv = layout[v].submb_count;
        // Consumer microbatch -> producer microbatch ranges: all producer
        // sub-microbatches of global microbatch k go to the consumer's first one.
        std::vector<int> first{0};
        for (int k = 0; k < m; ++k) {
          const int end = first.back() + su[k];
          for (int x = 0; x < sv[k]; ++x) first.push_back(end);  // later sub-microbatches take none
        }
        // Stages holding the producing module's last layer and the consuming
        // module's first, each with the part of the producer's output the
        // consumer takes (MMScale's broker scatters it: every sample crosses
        // once, and the pairs fall into gcd(Du, Dv) groups sharing no replica).
        std::map<std::pair<int, int>, double> stage_pairs;
        for (const auto& cname : plan.units[v].modules) {
          const int cm = model.FindModule(cname);
          for (int pm : model.modules[cm].inputs) {
            if (std::find(plan.units[u].modules.begin(), plan.units[u].modules.end(), model.modules[pm].name) ==
                plan.units[u].modules.end()) {
              continue;
            }
            auto flat_index = [&](int uu, int mi, bool last) {
              const auto& ls = layout[uu].layers;
              int idx = -1;
              for (size_t i = 0; i < ls.size(); ++i) {
                if (ls[i].first == mi && (idx < 0 || last)) idx = static_cast<int>(i);
              }
              return idx;
            };
            const int pl = flat_index(u, pm, true), cl = flat_index(v, cm, false);
            for (int d = 0; d < Du; ++d) {
              for (int e = 0; e < Dv; ++e) {
                // Shares [d/Du, (d+1)/Du) and [e/Dv, (e+1)/Dv) overlap.
                if (static_cast<int64_t>(d) * Dv >= static_cast<int64_t>(e + 1) * Du ||
                    static_cast<int64_t>(e) * Du >= static_cast<int64_t>(d + 1) * Dv) {
                  continue;
                }
                const int ps = layout[u].stage_of[layout[u].template_of(d)][pl];
                const int cs = layout[v].stage_of[layout[v].template_of(e)][cl];
                // |[d/Du, (d+1)/Du) & [e/Dv, (e+1)/Dv)| / (1/Du).
                const int64_t lo = std::max<int64_t>(static_cast<int64_t>(d) * Dv, static_cast<int64_t>(e) * Du);
                const int64_t hi =
                    std::min<int64_t>(static_cast<int64_t>(d + 1) * Dv, static_cast<int64_t>(e + 1) * Du);
                stage_pairs.emplace(std::make_pair(stage_id[u][d][ps], stage_id[v][e][cs]),
                                    static_cast<double>(hi - lo) / Dv);
              }
            }
          }
        }
        for (const auto& [pair, share] : stage_pairs) sch.edges.push_back({pair.first, pair.second, first, {}, share});
      }
    }
    sch.dag = true;
  }

  void AddGradientSync() {
    // Layer-wise gradient sync across a unit's replicas (and templates):
    // replicas of one template sync stage by stage, bucket by bucket (one
    // all-reduce, sync_set); stages of different templates wait for every
    // stage holding one of their layers (sync_with).
    sch.sync_with.assign(sch.num_stages(), {});
    sch.sync_set.assign(sch.num_stages(), -1);
    int sets = 0;
    for (int u = 0; u < num_units; ++u) {
      const UnitLayout& L = layout[u];
      const int D = built(u);
      if (D < 2) continue;
      for (size_t t = 0; t < L.replica_base.size(); ++t) {
        const PipelineSpec& ps = plan.units[u].pipelines[t];
        for (int j = 0; j < ps.replicas; ++j) {
          const auto& ids = stage_id[u][L.replica_base[t] + j];
          for (size_t s = 0; s < ids.size(); ++s) sch.sync_set[ids[s]] = sets + static_cast<int>(s);
        }
        sets += static_cast<int>(ps.stages.size());
      }
      // The (stage, stage) pairs holding a same layer depend only on the two
      // replicas' templates: found once per pair of templates, not per pair of
      // replicas (thousands of replicas at scale).
      std::map<std::pair<int, int>, std::vector<std::pair<int, int>>> template_pairs;
      for (int d = 0; d < D; ++d) {
        for (int e = 0; e < D; ++e) {
          const int td = L.template_of(d), te = L.template_of(e);
          if (td == te) continue;  // the same cut: sync_set
          auto [pos, inserted] = template_pairs.try_emplace({td, te});
          if (inserted) {
            std::set<std::pair<int, int>> pairs;
            for (size_t i = 0; i < L.layers.size(); ++i) pairs.insert({L.stage_of[td][i], L.stage_of[te][i]});
            pos->second.assign(pairs.begin(), pairs.end());
          }
          for (auto [sd, se] : pos->second) sch.sync_with[stage_id[u][d][sd]].push_back(stage_id[u][e][se]);
        }
      }
    }
    if (fold) {  // the replicated join syncs the replicas' copies of each stage
      sch.sync_with.clear();
      sch.sync_set.clear();
    }
  }

  void AddPhaseBarriers() {
    // Barriers between temporal phases sharing a group, per round.
    auto in_round = [&](const Action& a, int round) {
      return a.microbatch / (sch.microbatches_of(a.stage) / rounds) == round;
    };
    auto first_of = [&](int rank, bool forward, int round) {
      const auto& acts = sch.ranks[rank];
      for (int i = 0; i < static_cast<int>(acts.size()); ++i) {
        const bool f = acts[i].kind == ActionKind::kForward;
        const bool b = acts[i].kind == ActionKind::kBackward || acts[i].kind == ActionKind::kBackwardData;
        if (((forward && f) || (!forward && b)) && in_round(acts[i], round)) return i;
      }
      return -1;
    };
    auto last_of = [&](int rank, bool forward, int round) {
      const auto& acts = sch.ranks[rank];
      for (int i = static_cast<int>(acts.size()) - 1; i >= 0; --i) {
        const bool f = acts[i].kind == ActionKind::kForward;
        const bool b = acts[i].is_compute() && !f;
        if (((forward && f) || (!forward && b)) && in_round(acts[i], round)) return i;
      }
      return -1;
    };
    for (int g = 0; g < out.num_groups; ++g) {
      for (int a : group_ranks[g]) {
        for (int b : group_ranks[g]) {
          const Unit& ua = plan.units[out.ranks[a].unit];
          const Unit& ub = plan.units[out.ranks[b].unit];
          if (ua.phase >= ub.phase) continue;
          for (int round = 0; round < rounds; ++round) {
            sch.extra_deps.push_back({b, first_of(b, true, round), a, last_of(a, true, round)});
            sch.extra_deps.push_back({a, first_of(a, false, round), b, last_of(b, false, round)});
          }
        }
      }
    }
  }

  const Model& model;
  const Plan& plan;
  const IterationSchedule* it;
  ExecutionPlan& out;
  Schedule& sch;
  bool uniform = false, fold = false;
  int m = 0, num_units = 0, only = -1, rounds = 1;
  std::vector<UnitLayout> layout;
  std::vector<std::vector<int>> inputs;  // per unit, the units feeding it
  std::vector<int> before, after;        // pipeline depth of same-phase chained units before and after each
  // stage_id[u][d][s], rank_id[u][d][r]: schedule ids of unit u's replica d's stages and ranks.
  std::vector<std::vector<std::vector<int>>> stage_id, rank_id;
  std::vector<std::vector<int>> group_ranks;  // per GPU group, the ranks on it
};

}  // namespace

void CompileUnits(const Model& model, const Plan& plan, const IterationSchedule* it,
                  const std::vector<std::vector<int>>& global_mbs, ExecutionPlan& out, const CompileOptions& options) {
  UnitsCompiler(model, plan, it, global_mbs, out, options).Run();
}

}  // namespace loom
