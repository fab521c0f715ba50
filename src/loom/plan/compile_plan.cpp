#include "loom/plan/compile_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "loom/error.h"
#include "loom/plan/compile_shapes.h"
#include "loom/plan/validate_plan.h"

namespace loom {

namespace {

// Checks that `it` places every sample of the batch exactly once (in a global
// microbatch or deferred) and that its per-unit counts fit the plan.
void CheckPlacement(const Plan& plan, const IterationSchedule& it, int m) {
  if (static_cast<int>(it.microbatch_samples.size()) != m) {
    throw Error(fmt::format("iteration schedule: {} microbatches, the plan runs {}", it.microbatch_samples.size(), m));
  }
  std::vector<int> seen(plan.global_batch, 0);
  for (const auto& mb : it.microbatch_samples) {
    for (int s : mb) {
      if (s < 0 || s >= plan.global_batch) {
        throw Error(fmt::format("iteration schedule: sample {} is outside the batch of {}", s, plan.global_batch));
      }
      ++seen[s];
    }
  }
  for (int s : it.deferred) {
    if (s < 0 || s >= plan.global_batch) {
      throw Error(fmt::format("iteration schedule: deferred sample {} is outside the batch", s));
    }
    ++seen[s];
  }
  if (!it.deferred.empty() && static_cast<int64_t>(it.deferred.size()) == plan.global_batch) {
    throw Error(fmt::format("iteration schedule: all {} samples are deferred; a batch trains at least one (Entrain "
                            "defers part of a batch to the next, never all of it)",
                            plan.global_batch));
  }
  for (int s = 0; s < plan.global_batch; ++s) {
    if (seen[s] != 1) {
      throw Error(
          fmt::format("iteration schedule: sample {} is placed {} times; every sample must be in exactly "
                      "one microbatch or deferred",
                      s, seen[s]));
    }
  }
  for (const auto& [unit, mbs] : it.unit_microbatch_samples) {
    if (plan.FindUnit(unit) < 0)
      throw Error(fmt::format("iteration schedule: unit_microbatch_samples: no unit {}", unit));
    if (static_cast<int>(mbs.size()) != m) {
      throw Error(fmt::format("iteration schedule: unit_microbatch_samples.{}: {} microbatches, the plan runs {}", unit,
                              mbs.size(), m));
    }
    if (it.sub_microbatches.count(unit)) {
      throw Error(
          fmt::format("iteration schedule: unit {} has both its own microbatches and sub_microbatches; give "
                      "one",
                      unit));
    }
    // The unit trains exactly the samples the global microbatches hold.
    std::vector<int> want, got;
    for (const auto& mb : it.microbatch_samples) want.insert(want.end(), mb.begin(), mb.end());
    for (const auto& mb : mbs) got.insert(got.end(), mb.begin(), mb.end());
    std::sort(want.begin(), want.end());
    std::sort(got.begin(), got.end());
    if (got != want) {
      throw Error(
          fmt::format("iteration schedule: unit_microbatch_samples.{}: holds {} sample placements; it must "
                      "place every sample of microbatch_samples ({}) exactly once",
                      unit, got.size(), want.size()));
    }
  }
  for (const auto& [unit, replicas] : it.replica_microbatch_samples) {
    const std::string f = "iteration schedule: replica_microbatch_samples." + unit;
    const int u = plan.FindUnit(unit);
    if (u < 0) throw Error(fmt::format("iteration schedule: replica_microbatch_samples: no unit {}", unit));
    if (it.sub_microbatches.count(unit) || it.unit_microbatch_samples.count(unit)) {
      throw Error(fmt::format("{}: the unit also has sub_microbatches or unit_microbatch_samples; give one", f));
    }
    if (static_cast<int>(replicas.size()) != plan.units[u].num_replicas()) {
      throw Error(fmt::format("{}: {} replicas, the unit has {}", f, replicas.size(), plan.units[u].num_replicas()));
    }
    std::vector<int> want, got;
    for (const auto& mb : it.microbatch_samples) want.insert(want.end(), mb.begin(), mb.end());
    for (size_t d = 0; d < replicas.size(); ++d) {
      if (replicas[d].empty()) throw Error(fmt::format("{}[{}]: no microbatch; every replica needs one", f, d));
      for (size_t k = 0; k < replicas[d].size(); ++k) {
        if (replicas[d][k].empty()) throw Error(fmt::format("{}[{}][{}]: an empty microbatch", f, d, k));
        got.insert(got.end(), replicas[d][k].begin(), replicas[d][k].end());
      }
    }
    std::sort(want.begin(), want.end());
    std::sort(got.begin(), got.end());
    if (got != want) {
      throw Error(
          fmt::format("{}: holds {} sample placements; it must place every sample of microbatch_samples ({}) "
                      "exactly once",
                      f, got.size(), want.size()));
    }
  }
  for (const auto& [unit, counts] : it.sub_microbatches) {
    if (plan.FindUnit(unit) < 0) throw Error(fmt::format("iteration schedule: sub_microbatches: no unit {}", unit));
    if (static_cast<int>(counts.size()) != m) {
      throw Error(fmt::format("iteration schedule: sub_microbatches.{}: {} counts for {} microbatches", unit,
                              counts.size(), m));
    }
    for (int n : counts) {
      if (n < 1) throw Error(fmt::format("iteration schedule: sub_microbatches.{}: counts must be >= 1", unit));
    }
  }
}

// Ranks that share a GPU (units of temporal phases, or co-located under SM
// quotas) take their optimizer step only after every compute action of the
// others on that GPU, and one after another in rank order: the GPU runs the
// steps after the last phase's backward, not beside it or each other (the
// runtime steps every rank of a process after all of its actions, on one
// stream). Without this a later phase's optimizer overlapped an earlier
// phase's backward on the same SMs, and an iteration of phases came out
// shorter than the same work on one stage (a negative bubble).
void OrderOptimizerStepsOnSharedGpus(ExecutionPlan& out) {
  Schedule& sch = out.schedule;
  // GPU group -> ranks on it. Compiled for every candidate of every search,
  // so plain vectors, and nothing more when no two ranks share a group.
  std::vector<std::vector<int>> on_group(static_cast<size_t>(std::max(out.num_groups, 0)));
  bool shared = false;
  for (int r = 0; r < static_cast<int>(out.ranks.size()); ++r) {
    for (int g = out.ranks[r].group; g < out.ranks[r].group + out.ranks[r].num_groups; ++g) {
      if (g >= static_cast<int>(on_group.size())) on_group.resize(g + 1);
      on_group[g].push_back(r);
      shared = shared || on_group[g].size() > 1;
    }
  }
  if (!shared) return;
  auto last_of = [&](int r, bool compute) {
    const auto& acts = sch.ranks[r];
    for (int i = static_cast<int>(acts.size()) - 1; i >= 0; --i) {
      if (compute ? acts[i].is_compute() : acts[i].kind == ActionKind::kOptimizerStep) return i;
    }
    return -1;
  };
  std::set<std::pair<int, int>> done;  // (rank, after rank)
  for (const auto& ranks : on_group) {
    if (ranks.size() < 2) continue;
    for (int a : ranks) {
      const int step = last_of(a, false);
      if (step < 0) continue;
      for (int b : ranks) {
        if (b == a || !done.insert({a, b}).second) continue;
        if (const int last = last_of(b, true); last >= 0) sch.extra_deps.push_back({a, step, b, last});
        // The steps themselves one after another, in rank order.
        if (const int other = last_of(b, false); b < a && other >= 0) sch.extra_deps.push_back({a, step, b, other});
      }
    }
  }
}

}  // namespace

std::vector<int> Range(int lo, int hi) {
  std::vector<int> v(hi - lo);
  std::iota(v.begin(), v.end(), lo);
  return v;
}

int ExecStage::num_layers() const {
  int n = 0;
  for (const auto& r : layers) n += r.end - r.begin;
  return n;
}

std::vector<int> SplitEvenPart(const std::vector<int>& items, int parts, int d) {
  const int64_t n = static_cast<int64_t>(items.size());
  return std::vector<int>(items.begin() + d * n / parts, items.begin() + (d + 1) * n / parts);
}

std::vector<std::vector<int>> SplitEven(const std::vector<int>& items, int parts) {
  std::vector<std::vector<int>> out(parts);
  for (int d = 0; d < parts; ++d) out[d] = SplitEvenPart(items, parts, d);
  return out;
}

std::string StageLabel(const StageSpec& stage) {
  std::string label;
  for (const auto& r : stage.layers) {
    label += fmt::format("{}{}[{}:{}]", label.empty() ? "" : "+", r.module, r.begin, r.end);
  }
  return label;
}

int NumItems(const Sample& s) { return static_cast<int>(s.images.size() + s.videos.size() + s.audios.size()); }

Sample PieceSample(const Batch& batch, const SamplePiece& piece) {
  const Sample& s = batch.samples.at(piece.sample);
  if (piece.item < 0) return s;
  Sample out;
  out.doc_text_tokens.assign(s.doc_text_tokens.size(), 0);
  int i = piece.item;
  if (i < static_cast<int>(s.images.size())) {
    out.images.push_back(s.images[i]);
    return out;
  }
  i -= static_cast<int>(s.images.size());
  if (i < static_cast<int>(s.videos.size())) {
    out.videos.push_back(s.videos[i]);
    return out;
  }
  i -= static_cast<int>(s.videos.size());
  out.audios.push_back(s.audios.at(i));
  return out;
}

namespace {

// Whether `layers` run one of the LLM's tied embedding and LM head but not
// the other: the stage's copy of the matrix takes the other copy's gradient
// at the step (Megatron-LM's tied word embeddings), summed whole.
bool HoldsOneTiedCopy(const Model& model, const std::vector<LayerRange>& layers) {
  const Module& lm = model.modules.back();
  if (lm.layers.empty() || lm.layers.back().kind != LayerKind::kLmHead || !lm.layers.back().tied ||
      lm.layers[0].frozen) {
    return false;
  }
  bool embedding = false, head = false;
  const int last = static_cast<int>(lm.layers.size()) - 1;
  for (const auto& r : layers) {
    if (r.module != lm.name) continue;
    embedding = embedding || (r.begin <= 0 && 0 < r.end);
    head = head || (r.begin <= last && last < r.end);
  }
  return embedding != head;
}

}  // namespace

ExecStage StageOf(const Model& model, const Plan& plan, int u, int t, int replica, const StageSpec& spec) {
  const Unit& unit = plan.units[u];
  ExecStage st;
  st.unit = u;
  st.pipeline = t;
  st.replica = replica;
  st.layers = spec.layers;
  st.tp = spec.tp > 0 ? spec.tp : unit.tp;
  st.cp = unit.cp;
  st.cp_split = unit.cp_split;
  st.gpus = unit.pipelines[t].span(spec.rank) * plan.group_gpus;
  st.seq_share = st.gpus / (st.tp * unit.cp);
  st.dp = unit.num_replicas();
  st.zero_stage = unit.zero_stage;
  // A stage holding one tied copy runs ZeRO-1 at most: the sum of the two
  // copies' gradients at the step needs them whole, which ZeRO-2 and 3 drop
  // (runtime/zero_shards.h; priced as what runs).
  if (st.zero_stage > 1 && HoldsOneTiedCopy(model, st.layers)) st.zero_stage = 1;
  st.sm_fraction = unit.sm_fraction;
  st.phase = unit.phase;
  st.recompute = unit.recompute;
  st.sequence_parallel = unit.sequence_parallel;
  st.label = StageLabel(spec);
  return st;
}

std::vector<ExecRank> TemplateRanks(const Plan& plan, int u, int t, int replica, int first_group,
                                    const std::string& name) {
  const Unit& unit = plan.units[u];
  const PipelineSpec& ps = unit.pipelines[t];
  std::vector<ExecRank> out;
  int group = first_group;
  for (int r = 0; r < ps.pp; ++r) {
    ExecRank rank{u, t, replica, r, group, ps.span(r), unit.sm_fraction, fmt::format("{} pp{}", name, r)};
    group += ps.span(r);
    out.push_back(std::move(rank));
  }
  return out;
}

void AddDataParallelGroups(ExecutionPlan& out, const Plan& plan, const Model& model) {
  std::map<std::pair<int, std::string>, int> index;  // (unit, layers) -> group
  for (size_t s = 0; s < out.stages.size(); ++s) {
    ExecStage& st = out.stages[s];
    auto [pos, inserted] = index.emplace(std::make_pair(st.unit, st.label), static_cast<int>(out.groups.size()));
    if (inserted) out.groups.push_back({static_cast<int>(out.groups.size()), GroupKind::kDataParallel, {}, {}});
    st.dp_group = pos->second;
    auto& members = out.groups[pos->second].gpu_groups;
    const int group = out.ranks[out.schedule.stage_rank[s]].group;
    if (out.replicated) {
      // The ranks are replica 0's; replica j's copy of a pipeline rank sits one replica's groups further per replica.
      const int stride = plan.units[st.unit].pipelines[st.pipeline].groups();
      for (int j = 0; j < st.dp; ++j) members.push_back(group + j * stride);
    } else {
      members.push_back(group);
    }
  }
  for (const auto& [key, id] : index) {  // sorted once: a group gathers one member per replica
    auto& members = out.groups[id].gpu_groups;
    std::sort(members.begin(), members.end());
    members.erase(std::unique(members.begin(), members.end()), members.end());
  }
  // Oobleck Fig. 2.9: templates cut the layers at different points, so a
  // layer's copies are summed over every GPU group holding it; maximal runs of
  // layers (model order) held by the same GPU groups are one segment each.
  for (size_t u = 0; u < plan.units.size(); ++u) {
    if (plan.units[u].pipelines.size() < 2) continue;
    std::map<std::pair<int, int>, std::set<int>> holders;  // (module, layer) -> GPU groups
    for (size_t s = 0; s < out.stages.size(); ++s) {
      const ExecStage& st = out.stages[s];
      if (st.unit != static_cast<int>(u)) continue;
      const ExecRank& rank = out.ranks[out.schedule.stage_rank[s]];
      for (const auto& r : st.layers) {
        for (int l = r.begin; l < r.end; ++l) {
          for (int g = rank.group; g < rank.group + rank.num_groups; ++g)
            holders[{model.FindModule(r.module), l}].insert(g);
        }
      }
    }
    std::map<std::pair<int, int>, int> segment_of;
    const std::set<int>* last = nullptr;
    for (const auto& [key, who] : holders) {
      CommGroup* g = out.groups.empty() ? nullptr : &out.groups.back();
      const std::string& name = model.modules[key.first].name;
      const bool extends =
          last != nullptr && *last == who && g->layers.back().module == name && g->layers.back().end == key.second;
      if (last != nullptr && *last == who && !extends) {
        g->layers.push_back({name, key.second, key.second + 1});  // the same holders, across a module boundary
      } else if (extends) {
        ++g->layers.back().end;
      } else {
        out.groups.push_back({static_cast<int>(out.groups.size()),
                              GroupKind::kLayerSegment,
                              std::vector<int>(who.begin(), who.end()),
                              {{name, key.second, key.second + 1}}});
      }
      last = &who;
      segment_of[key] = out.groups.back().id;
    }
    for (ExecStage& st : out.stages) {
      if (st.unit != static_cast<int>(u)) continue;
      for (const auto& r : st.layers) {
        for (int l = r.begin; l < r.end; ++l) {
          const int id = segment_of.at({model.FindModule(r.module), l});
          if (st.segment_groups.empty() || st.segment_groups.back() != id) st.segment_groups.push_back(id);
        }
      }
    }
  }
}

ExecutionPlan CompilePlan(const Model& model, const Cluster& c, const Workload& w, const Plan& plan, const Batch& batch,
                          const IterationSchedule* it, CompileOptions options) {
  ValidatePlan(plan, model, c, w, "plan " + plan.strategy);
  if (options.only_replica >= plan.units[0].num_replicas()) {
    throw Error(fmt::format("CompilePlan: only_replica {}; the plan's first unit has {} replicas", options.only_replica,
                            plan.units[0].num_replicas()));
  }
  if (static_cast<int64_t>(batch.samples.size()) != plan.global_batch) {
    throw Error(
        fmt::format("batch has {} samples, the plan's global batch is {}", batch.samples.size(), plan.global_batch));
  }
  for (const auto& u : plan.units) {
    for (const auto& p : u.pipelines) {
      if (p.schedule == ScheduleKind::kCustom &&
          (it == nullptr || (it->rank_orders.empty() && !it->unit_rank_orders.count(u.name)))) {
        throw Error(
            fmt::format("plan {}: unit {} runs the custom schedule, whose per-rank orders come with each "
                        "batch (iteration schedule rank_orders); none was given",
                        plan.strategy, u.name));
      }
    }
  }
  ExecutionPlan out;
  out.strategy = plan.strategy;
  out.group_gpus = plan.group_gpus;
  out.num_groups = c.num_gpus() / plan.group_gpus;
  out.precision = w.precision;
  const bool uniform = UniformMicrobatches(plan);
  const int m = plan.units[0].pipelines[0].microbatches;

  // Samples of every global microbatch: the schedule's placement, or the loader's order.
  std::vector<std::vector<int>> global_mbs;
  if (it != nullptr) {
    if (!uniform) throw Error("iteration schedule: needs a plan whose pipelines all run the same microbatch count");
    CheckPlacement(plan, *it, m);
    global_mbs = it->microbatch_samples;
  } else if (uniform) {
    const int per = static_cast<int>(plan.global_batch / m);
    for (int k = 0; k < m; ++k) global_mbs.push_back(Range(k * per, (k + 1) * per));
  }
  out.samples = plan.global_batch - (it ? static_cast<int64_t>(it->deferred.size()) : 0);

  if (it != nullptr && it->woven()) {
    CompileWoven(model, plan, batch, *it, out);
  } else if (plan.units.size() == 1 && plan.units[0].pipelines.size() == 1 &&
             (it == nullptr || (it->replica_microbatch_samples.empty() && it->unit_rank_orders.empty()))) {
    CompilePipeline(model, plan, it, global_mbs, out, options);
  } else {
    CompileUnits(model, plan, it, global_mbs, out, options);
  }
  AddDataParallelGroups(out, plan, model);
  // Every rank ends with its stages' gradient buckets on the communication
  // stream (over each stage's data-parallel group), a wait, and its optimizer step.
  AddGradientSync(out.schedule, kGradientBuckets);
  for (auto& rank : out.schedule.ranks) {
    for (Action& a : rank) {
      if (a.kind == ActionKind::kCollective) a.group = out.stages[a.stage].dp_group;
    }
  }
  AddOptimizerStep(out.schedule);
  OrderOptimizerStepsOnSharedGpus(out);
  ValidateExecution(out);
  return out;
}

void ValidateExecution(const ExecutionPlan& e) {
  const Schedule& s = e.schedule;
  if (static_cast<int>(e.stages.size()) != s.num_stages()) {
    throw Error(
        fmt::format("execution plan: {} stages described, the schedule has {}", e.stages.size(), s.num_stages()));
  }
  if (static_cast<int>(e.ranks.size()) != s.num_ranks) {
    throw Error(fmt::format("execution plan: {} ranks described, the schedule has {}", e.ranks.size(), s.num_ranks));
  }
  if (e.replicas.empty()) throw Error("execution plan: no replica");
  for (size_t r = 0; r < e.replicas.size(); ++r) {
    if (static_cast<int>(e.replicas[r].size()) != s.num_stages()) {
      throw Error(fmt::format("execution plan: replica {} has contents for {} stages, not {}", r, e.replicas[r].size(),
                              s.num_stages()));
    }
    for (int v = 0; v < s.num_stages(); ++v) {
      if (static_cast<int>(e.replicas[r][v].size()) != s.microbatches_of(v)) {
        throw Error(fmt::format("execution plan: replica {} stage {} has {} microbatches, the schedule {}", r, v,
                                e.replicas[r][v].size(), s.microbatches_of(v)));
      }
      for (const auto& mb : e.replicas[r][v]) {
        if (!mb.layer_recompute.empty() && static_cast<int>(mb.layer_recompute.size()) != e.stages[v].num_layers()) {
          throw Error(fmt::format("execution plan: stage {}: {} recompute choices for {} layers", v,
                                  mb.layer_recompute.size(), e.stages[v].num_layers()));
        }
      }
    }
  }
  for (size_t v = 0; v < e.stages.size(); ++v) {
    if (e.stages[v].dp_group < 0 || e.stages[v].dp_group >= static_cast<int>(e.groups.size())) {
      throw Error(fmt::format("execution plan: stage {} has no data-parallel group", v));
    }
  }
  for (int r = 0; r < s.num_ranks; ++r) {
    for (const Action& a : s.ranks[r]) {
      if (a.kind == ActionKind::kCollective && (a.group < 0 || a.group >= static_cast<int>(e.groups.size()))) {
        throw Error(fmt::format("execution plan: rank {}: {} names no communication group", r, ActionName(a)));
      }
    }
  }
}

}  // namespace loom
