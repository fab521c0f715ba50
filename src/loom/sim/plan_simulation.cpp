#include "loom/sim/plan_simulation.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "loom/cost/collectives.h"
#include "loom/cost/frozen.h"
#include "loom/cost/memory.h"
#include "loom/cost/token_stats.h"
#include "loom/error.h"
#include "loom/pipeline/schedules.h"
#include "loom/plan/validate_plan.h"
#include "loom/sim/layer_pricing.h"
#include "loom/sim/plan_helpers.h"
#include "loom/sim/woven_simulation.h"

namespace loom {

namespace {

// Per unit: its flattened layer list and, per template, the stage of each layer.
struct UnitLayout {
  std::vector<std::pair<int, int>> layers;           // (module, layer)
  std::vector<std::vector<int>> stage_of;            // [template][flat layer] -> template stage
  std::vector<std::vector<int>> stage_first;         // [template][stage] -> first flat layer; size stages + 1
  std::vector<int> replica_base;                     // [template] -> first flattened replica
  std::vector<std::vector<int>> submb_count;         // [replica] -> per global microbatch count (uniform) or empty
  std::vector<std::vector<std::vector<int>>> samples;  // [replica][unit microbatch] -> sample indices
  int microbatches = 0;                              // per replica, after sub-microbatching (uniform plans)
};

std::vector<int> Range(int lo, int hi) {
  std::vector<int> v(hi - lo);
  std::iota(v.begin(), v.end(), lo);
  return v;
}

}  // namespace

PlanSimulation BuildPlanSimulation(const Model& model, const Cluster& c, const Workload& w, const Plan& plan,
                                   const Batch& batch, const IterationSchedule* it, LayerOptions* layer_options) {
  ValidatePlan(plan, model, c, w, "plan " + plan.strategy);
  if (static_cast<int64_t>(batch.samples.size()) != plan.global_batch) {
    throw Error(fmt::format("batch has {} samples, the plan's global batch is {}", batch.samples.size(),
                            plan.global_batch));
  }
  PlanSimulation out;
  const int g_gpus = plan.group_gpus;
  out.num_groups = c.num_gpus() / g_gpus;
  const bool uniform = UniformMicrobatches(plan);
  const int m = plan.units[0].pipelines[0].microbatches;
  const int num_units = static_cast<int>(plan.units.size());

  // 1. Samples: global microbatches, then each unit's replicas and sub-microbatches.
  std::vector<std::vector<int>> global_mbs;
  if (it != nullptr) {
    if (!uniform) throw Error("iteration schedule: needs a plan whose pipelines all run the same microbatch count");
    if (static_cast<int>(it->microbatch_samples.size()) != m) {
      throw Error(fmt::format("iteration schedule: {} microbatches, the plan runs {}", it->microbatch_samples.size(), m));
    }
    std::vector<int> seen(plan.global_batch, 0);
    for (const auto& mb : it->microbatch_samples) {
      for (int s : mb) {
        if (s < 0 || s >= plan.global_batch) {
          throw Error(fmt::format("iteration schedule: sample {} is outside the batch of {}", s, plan.global_batch));
        }
        ++seen[s];
      }
    }
    for (int s : it->deferred) {
      if (s < 0 || s >= plan.global_batch) {
        throw Error(fmt::format("iteration schedule: deferred sample {} is outside the batch", s));
      }
      ++seen[s];
    }
    for (int s = 0; s < plan.global_batch; ++s) {
      if (seen[s] != 1) {
        throw Error(fmt::format("iteration schedule: sample {} is placed {} times; every sample must be in exactly "
                                "one microbatch or deferred",
                                s, seen[s]));
      }
    }
    for (const auto& [unit, counts] : it->sub_microbatches) {
      if (plan.FindUnit(unit) < 0) throw Error(fmt::format("iteration schedule: sub_microbatches: no unit {}", unit));
      if (static_cast<int>(counts.size()) != m) {
        throw Error(fmt::format("iteration schedule: sub_microbatches.{}: {} counts for {} microbatches", unit,
                                counts.size(), m));
      }
      for (int n : counts) {
        if (n < 1) throw Error(fmt::format("iteration schedule: sub_microbatches.{}: counts must be >= 1", unit));
      }
    }
    global_mbs = it->microbatch_samples;
  } else if (uniform) {
    const int per = static_cast<int>(plan.global_batch / m);
    for (int k = 0; k < m; ++k) global_mbs.push_back(Range(k * per, (k + 1) * per));
  }
  out.samples = plan.global_batch - (it ? static_cast<int64_t>(it->deferred.size()) : 0);
  if (it != nullptr && it->woven()) return BuildWovenSimulation(model, c, plan, batch, *it, std::move(out), layer_options);

  const auto needs = ComputeBackwardNeeds(model);
  std::vector<UnitLayout> layout(num_units);
  for (int u = 0; u < num_units; ++u) {
    const Unit& unit = plan.units[u];
    UnitLayout& L = layout[u];
    for (const auto& name : unit.modules) {
      const int mi = model.FindModule(name);
      for (int l = 0; l < static_cast<int>(model.modules[mi].layers.size()); ++l) L.layers.push_back({mi, l});
    }
    int base = 0;
    for (const auto& p : unit.pipelines) {
      L.replica_base.push_back(base);
      base += p.replicas;
      std::vector<int> stage_of, first{0};
      for (int s = 0; s < static_cast<int>(p.stages.size()); ++s) {
        for (const auto& r : p.stages[s].layers) stage_of.insert(stage_of.end(), r.end - r.begin, s);
        first.push_back(static_cast<int>(stage_of.size()));  // validated: stages hold the layers in order
      }
      L.stage_of.push_back(std::move(stage_of));
      L.stage_first.push_back(std::move(first));
    }
    const int D = unit.num_replicas();
    L.samples.assign(D, {});
    if (uniform) {
      std::vector<int> subs(m, 1);
      if (it != nullptr && it->sub_microbatches.count(unit.name)) subs = it->sub_microbatches.at(unit.name);
      for (int k = 0; k < m; ++k) {
        auto slices = SplitEven(global_mbs[k], D);
        for (int d = 0; d < D; ++d) {
          for (auto& sub : SplitEven(slices[d], subs[k])) L.samples[d].push_back(std::move(sub));
        }
      }
      L.submb_count.assign(1, subs);
      L.microbatches = std::accumulate(subs.begin(), subs.end(), 0);
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
  }

  // 2. Price every layer of every unit for every (replica, microbatch).
  // times[u][d][k][flat layer]
  std::vector<std::vector<std::vector<std::vector<LayerTimes>>>> times(num_units);
  std::vector<std::vector<std::vector<std::vector<TokenStats>>>> tokens(num_units);
  std::vector<double> module_tokens(model.modules.size(), 0.0);
  for (int u = 0; u < num_units; ++u) {
    const Unit& unit = plan.units[u];
    UnitLayout& L = layout[u];
    const int D = unit.num_replicas();
    const int share = g_gpus / (unit.tp * unit.cp);  // group members that split sequences between them
    times[u].assign(D, {});
    tokens[u].assign(D, {});
    for (int d = 0; d < D; ++d) {
      for (const auto& ids : L.samples[d]) {
        std::vector<Sample> mb;
        mb.reserve(ids.size());
        for (int s : ids) mb.push_back(batch.samples[s]);
        auto t = CountModuleTokens(model, mb);
        std::vector<LayerTimes> lts(L.layers.size());
        for (size_t i = 0; i < L.layers.size(); ++i) {
          auto [mi, li] = L.layers[i];
          LayerParallelism par;
          par.tp = unit.tp;
          par.cp = unit.cp;
          par.split = SplitsOverTensorParallel(model.modules[mi], unit.tp);
          par.recompute = unit.recompute;
          par.fsdp = unit.zero_stage == 3;
          par.fsdp_ranks = D * g_gpus / unit.tp;
          lts[i] = PriceLayer(model.modules[mi].layers[li], ShareOfSequences(t[mi], share), needs[mi][li], c, par);
          out.model_flops += lts[i].flops * g_gpus;
        }
        for (const auto& name : unit.modules) {
          const int mi = model.FindModule(name);
          module_tokens[mi] += t[mi].tokens;
        }
        times[u][d].push_back(std::move(lts));
        tokens[u][d].push_back(std::move(t));
      }
    }
  }
  out.tokens = *std::max_element(module_tokens.begin(), module_tokens.end());

  // Static memory and gradient sync per template stage (the same for every replica).
  auto stage_static = [&](int u, int t, int s) {
    return StageParamsOf(model, plan.units[u], plan.units[u].pipelines[t].stages[s]);
  };
  auto stage_cost = [&](int u, int t, int d, int s, int k) {
    const Unit& unit = plan.units[u];
    const UnitLayout& L = layout[u];
    StageCost sc;
    int last = -1;
    for (int i = L.stage_first[t][s]; i < L.stage_first[t][s + 1]; ++i) {
      const LayerTimes& lt = times[u][d][k][i];
      sc.forward_s += lt.forward_s / unit.sm_fraction;
      sc.backward_data_s += lt.backward_data_s / unit.sm_fraction;
      sc.backward_weight_s += lt.backward_weight_s / unit.sm_fraction;
      sc.activation_bytes += lt.activation_bytes;
      sc.transient_bytes = std::max(sc.transient_bytes, lt.transient_bytes);
      last = i;
    }
    auto [mi, li] = L.layers[last];
    const int share = g_gpus / (unit.tp * unit.cp);
    sc.send_bytes = kActivationElemBytes * tokens[u][d][k][mi].tokens / (unit.cp * share) *
                    OutWidth(model.modules[mi].layers[li]);
    return sc;
  };
  auto label_of = [&](int u, int t, int s) { return StageLabel(plan.units[u].pipelines[t].stages[s]); };
  const Link p2p = c.LinkForSpan(2 * g_gpus);

  // 3a. One unit with one template: Megatron-style, replicas deduplicated.
  if (num_units == 1 && plan.units[0].pipelines.size() == 1) {
    const Unit& unit = plan.units[0];
    const PipelineSpec& ps = unit.pipelines[0];
    const int D = ps.replicas, M = layout[0].microbatches, S = static_cast<int>(ps.stages.size());
    out.deduplicated = true;
    out.schedule = MakeSchedule(ps.schedule, ps.pp, M, ps.vpp());
    for (int r = 0; r < ps.pp; ++r) {
      out.ranks.push_back({0, 0, 0, r, unit.first_group + r, unit.sm_fraction,
                           fmt::format("{} pp{}", unit.name, r)});
    }
    for (int s = 0; s < S; ++s) {
      out.stage_labels.push_back(label_of(0, 0, s));
      out.stage_unit.push_back(0);
    }
    const int share = g_gpus / (unit.tp * unit.cp);
    std::map<std::vector<double>, int> seen;
    for (int d = 0; d < D; ++d) {
      PipelineCosts pc;
      pc.p2p = p2p;
      pc.stage.assign(S, std::vector<StageCost>(M));
      pc.static_bytes.assign(ps.pp, 0.0);
      pc.grad_sync_s.assign(S, 0.0);
      for (int s = 0; s < S; ++s) {
        const StageParams sp = stage_static(0, 0, s);
        pc.static_bytes[ps.stages[s].rank] += ModelState(sp.trainable, sp.frozen, D * share * unit.cp, unit.zero_stage).total();
        pc.grad_sync_s[s] = GradSyncTime_s(sp, D, unit, g_gpus, c);
        for (int k = 0; k < M; ++k) pc.stage[s][k] = stage_cost(0, 0, d, s, k);
      }
      AddReplica(out, std::move(pc), seen);
    }
    return out;
  }

  // 3b. Every replica of every unit flattened into one schedule.
  // Pipeline depth before and after each unit among same-phase chained units,
  // so a chain of units runs as one 1F1B pipeline (MMScale: warm-up counts by
  // position in the whole pipeline).
  const auto inputs = UnitInputs(plan, model);
  auto max_pp = [&](int u) {
    int p = 0;
    for (const auto& ps : plan.units[u].pipelines) p = std::max(p, ps.pp);
    return p;
  };
  std::vector<int> before(num_units, 0), after(num_units, 0);
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

  Schedule& sch = out.schedule;
  sch.name = plan.strategy.empty() ? "plan" : plan.strategy;
  sch.num_microbatches = 0;
  PipelineCosts pc;
  pc.p2p = p2p;
  // stage_id[u][d][s], rank_id[u][d][r]
  std::vector<std::vector<std::vector<int>>> stage_id(num_units), rank_id(num_units);
  std::vector<std::vector<int>> group_ranks(out.num_groups);
  for (int u = 0; u < num_units; ++u) {
    const Unit& unit = plan.units[u];
    const UnitLayout& L = layout[u];
    const int D = unit.num_replicas();
    const int share = g_gpus / (unit.tp * unit.cp);
    stage_id[u].assign(D, {});
    rank_id[u].assign(D, {});
    int group = unit.first_group;
    for (size_t t = 0; t < unit.pipelines.size(); ++t) {
      const PipelineSpec& ps = unit.pipelines[t];
      const int M = uniform ? L.microbatches : ps.microbatches;
      const int depth = before[u] + ps.pp + after[u];
      const Schedule tmpl = MakeSchedule(ps.schedule, depth, M, ps.vpp());
      for (int j = 0; j < ps.replicas; ++j) {
        const int d = L.replica_base[t] + j;
        for (int r = 0; r < ps.pp; ++r, ++group) {
          const int rank = sch.num_ranks++;
          rank_id[u][d].push_back(rank);
          group_ranks[group].push_back(rank);
          out.ranks.push_back({u, static_cast<int>(t), j, r, group, unit.sm_fraction,
                               fmt::format("{} p{} r{} pp{}", unit.name, t, j, r)});
          pc.static_bytes.push_back(0.0);
          sch.ranks.emplace_back();
        }
        for (int s = 0; s < static_cast<int>(ps.stages.size()); ++s) {
          const int id = sch.num_stages();
          stage_id[u][d].push_back(id);
          sch.stage_rank.push_back(rank_id[u][d][ps.stages[s].rank]);
          sch.stage_microbatches.push_back(M);
          out.stage_labels.push_back(label_of(u, static_cast<int>(t), s));
          out.stage_unit.push_back(u);
          const StageParams sp = stage_static(u, static_cast<int>(t), s);
          pc.static_bytes[sch.stage_rank.back()] +=
              ModelState(sp.trainable, sp.frozen, D * share * unit.cp, unit.zero_stage).total();
          pc.grad_sync_s.push_back(GradSyncTime_s(sp, D, unit, g_gpus, c));
          pc.stage.emplace_back();
          for (int k = 0; k < M; ++k) pc.stage.back().push_back(stage_cost(u, static_cast<int>(t), d, s, k));
          if (s > 0) sch.edges.push_back({id - 1, id, {}});
        }
        // Compute order: this replica's ranks are ranks before[u] .. of the template.
        for (int r = 0; r < ps.pp; ++r) {
          for (const Action& a : tmpl.ranks[before[u] + r]) {
            if (!a.is_compute()) continue;
            Action b = a;
            // Template stage (chunk * depth + before + r) -> this pipeline's stage (chunk * pp + r).
            const int chunk = a.stage / depth;
            b.stage = stage_id[u][d][chunk * ps.pp + r];
            sch.ranks[rank_id[u][d][r]].push_back(b);
          }
        }
      }
    }
    sch.num_microbatches = std::max(sch.num_microbatches, uniform ? L.microbatches : m);
  }

  // Broker edges between units: producing replica d feeds consuming replica e
  // when their shares of a global microbatch overlap.
  for (int v = 0; v < num_units; ++v) {
    for (int u : inputs[v]) {
      const int Du = plan.units[u].num_replicas(), Dv = plan.units[v].num_replicas();
      const auto& su = layout[u].submb_count[0];
      const auto& sv = layout[v].submb_count[0];
      // Consumer microbatch -> producer microbatch ranges: all producer
      // sub-microbatches of global microbatch k go to the consumer's first one.
      std::vector<int> first{0};
      for (int k = 0; k < m; ++k) {
        const int end = first.back() + su[k];
        for (int x = 0; x < sv[k]; ++x) first.push_back(end);  // later sub-microbatches take none
      }
      // Stages holding the producing module's last layer and the consuming module's first.
      std::set<std::pair<int, int>> stage_pairs;
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
              auto template_of = [&](int uu, int rep) {
                int t = 0;
                while (t + 1 < static_cast<int>(layout[uu].replica_base.size()) && layout[uu].replica_base[t + 1] <= rep) ++t;
                return t;
              };
              const int ps = layout[u].stage_of[template_of(u, d)][pl];
              const int cs = layout[v].stage_of[template_of(v, e)][cl];
              stage_pairs.insert({stage_id[u][d][ps], stage_id[v][e][cs]});
            }
          }
        }
      }
      for (auto [from, to] : stage_pairs) sch.edges.push_back({from, to, first});
    }
  }
  sch.dag = true;

  // Layer-wise gradient sync across a unit's replicas (and templates).
  sch.sync_with.assign(sch.num_stages(), {});
  for (int u = 0; u < num_units; ++u) {
    const UnitLayout& L = layout[u];
    const int D = plan.units[u].num_replicas();
    if (D < 2) continue;
    auto template_of = [&](int rep) {
      int t = 0;
      while (t + 1 < static_cast<int>(L.replica_base.size()) && L.replica_base[t + 1] <= rep) ++t;
      return t;
    };
    for (int d = 0; d < D; ++d) {
      for (int e = 0; e < D; ++e) {
        if (d == e) continue;
        const int td = template_of(d), te = template_of(e);
        std::set<std::pair<int, int>> pairs;
        for (size_t i = 0; i < L.layers.size(); ++i) pairs.insert({L.stage_of[td][i], L.stage_of[te][i]});
        for (auto [sd, se] : pairs) sch.sync_with[stage_id[u][d][sd]].push_back(stage_id[u][e][se]);
      }
    }
  }
  AddPointToPoint(sch);

  // Barriers between temporal phases sharing a group.
  auto first_of = [&](int rank, bool forward) {
    const auto& acts = sch.ranks[rank];
    for (int i = 0; i < static_cast<int>(acts.size()); ++i) {
      const bool f = acts[i].kind == ActionKind::kForward;
      const bool b = acts[i].kind == ActionKind::kBackward || acts[i].kind == ActionKind::kBackwardData;
      if ((forward && f) || (!forward && b)) return i;
    }
    return -1;
  };
  auto last_of = [&](int rank, bool forward) {
    const auto& acts = sch.ranks[rank];
    for (int i = static_cast<int>(acts.size()) - 1; i >= 0; --i) {
      const bool f = acts[i].kind == ActionKind::kForward;
      const bool b = acts[i].is_compute() && !f;
      if ((forward && f) || (!forward && b)) return i;
    }
    return -1;
  };
  for (int g = 0; g < out.num_groups; ++g) {
    for (int a : group_ranks[g]) {
      for (int b : group_ranks[g]) {
        const Unit& ua = plan.units[out.ranks[a].unit];
        const Unit& ub = plan.units[out.ranks[b].unit];
        if (ua.phase >= ub.phase) continue;
        sch.extra_deps.push_back({b, first_of(b, true), a, last_of(a, true)});
        sch.extra_deps.push_back({a, first_of(a, false), b, last_of(b, false)});
      }
    }
  }
  out.replicas.push_back(std::move(pc));
  out.replica_weight.push_back(1);
  return out;
}

}  // namespace loom
