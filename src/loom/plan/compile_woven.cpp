// Plan shape 5 (PipeWeaver's per-batch pipeline, docs/plan-format.md "Woven
// schedules"): a plan with one unit and one pipeline template whose iteration
// schedule cuts each module's share of a global microbatch into its own number
// of sub-microbatches (PipeWeaver §5 "modality-aware data batching"), orders
// every rank's forward and backward stages explicitly (§6.2) and chooses
// recomputation per layer and sub-microbatch (§6.3).
//
// The stages form a chain in the template's order; a stage's microbatches are
// its module's sub-microbatches, numbered in global-microbatch order. Where
// two neighbouring stages cut a global microbatch differently, every consumer
// sub-microbatch of it waits for all the producer's, and each producer
// sub-microbatch's backward for all the consumer's (WovenEdge). A module's sub-microbatches are contiguous
// runs of the replica's samples with balanced token counts (min-max
// partition); for modules that see only images, clips or audio (encoders and
// their projectors, ItemDrivenModule) the runs are of items, so a sample's
// images may land in several sub-microbatches. A count above the samples (or
// items) of a slice is an error.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "loom/cost/token_stats.h"
#include "loom/error.h"
#include "loom/pipeline/partition.h"
#include "loom/plan/compile_shapes.h"
#include "loom/plan/plan_json.h"

namespace loom {

namespace {

const char* kWovenNeedsOneUnit =
    "iteration schedule: module_sub_microbatches, rank_orders and layer_recompute need a plan with one unit and "
    "one pipeline template";

std::vector<int> CountsOf(const IterationSchedule& it, const std::string& module, int m) {
  auto found = it.module_sub_microbatches.find(module);
  return found == it.module_sub_microbatches.end() ? std::vector<int>(m, 1) : found->second;
}

}  // namespace

StageEdge WovenEdge(int from, int to, const std::vector<int>& producer_mbs, const std::vector<int>& consumer_mbs) {
  StageEdge e{from, to, {}, {}};
  if (producer_mbs == consumer_mbs) return e;  // one to one
  // Many to many inside each global microbatch: a consumer sub-microbatch may
  // read any of the producer's sub-microbatches of its global microbatch (its
  // samples' images may have landed in any of them), and a producer
  // sub-microbatch's gradient is whole only once every consumer sub-microbatch
  // of that global microbatch has run its backward. (Until issue 15 the
  // consumer's first sub-microbatch took all the producer's and the others
  // none: the simulator then let a producer's backward start after the first
  // consumer's backward alone, and the runtime, computing true gradients, could
  // not follow such orders.) The replicas share the schedule, so the edge
  // cannot follow one replica's samples more closely.
  for (int c : consumer_mbs) {
    std::vector<int> producers;
    for (int j = 0; j < static_cast<int>(producer_mbs.size()); ++j) {
      if (producer_mbs[j] == c) producers.push_back(j);
    }
    e.producers.push_back(std::move(producers));
  }
  return e;
}

bool ItemDrivenModule(const Model& model, int module) {
  const Module& m = model.modules[module];
  switch (m.tokens.source) {
    case TokenSource::kImage:
    case TokenSource::kVideo:
    case TokenSource::kAudio:
      return true;
    case TokenSource::kInputs:
      return !m.inputs.empty() &&
             std::all_of(m.inputs.begin(), m.inputs.end(), [&](int i) { return ItemDrivenModule(model, i); });
    default:
      return false;
  }
}

std::vector<std::vector<int>> WovenStageMicrobatches(const Plan& plan, const IterationSchedule& it) {
  if (plan.units.size() != 1 || plan.units[0].pipelines.size() != 1) throw Error(kWovenNeedsOneUnit);
  const Unit& unit = plan.units[0];
  const PipelineSpec& ps = unit.pipelines[0];
  const int m = ps.microbatches;
  for (const auto& [name, counts] : it.module_sub_microbatches) {
    if (std::find(unit.modules.begin(), unit.modules.end(), name) == unit.modules.end()) {
      throw Error(
          fmt::format("iteration schedule: module_sub_microbatches: unit {} holds no module {}", unit.name, name));
    }
    if (static_cast<int>(counts.size()) != m) {
      throw Error(fmt::format("iteration schedule: module_sub_microbatches.{}: {} counts for {} microbatches", name,
                              counts.size(), m));
    }
    for (int n : counts) {
      if (n < 1) throw Error(fmt::format("iteration schedule: module_sub_microbatches.{}: counts must be >= 1", name));
    }
  }
  std::vector<std::vector<int>> out;
  for (size_t s = 0; s < ps.stages.size(); ++s) {
    const auto& layers = ps.stages[s].layers;
    const std::vector<int> counts = CountsOf(it, layers.front().module, m);
    for (const auto& r : layers) {
      if (CountsOf(it, r.module, m) != counts) {
        throw Error(
            fmt::format("iteration schedule: module_sub_microbatches: stage {} holds {} and {}, which are cut "
                        "into different sub-microbatch counts; give them the same counts",
                        s, layers.front().module, r.module));
      }
    }
    out.emplace_back();
    for (int k = 0; k < m; ++k) out.back().insert(out.back().end(), counts[k], k);
  }
  return out;
}

void CompileWoven(const Model& model, const Plan& plan, const Batch& batch, const IterationSchedule& it,
                  ExecutionPlan& out) {
  const std::vector<std::vector<int>> stage_mb_global = WovenStageMicrobatches(plan, it);
  const Unit& unit = plan.units[0];
  const PipelineSpec& ps = unit.pipelines[0];
  const int D = ps.replicas, P = ps.pp, S = static_cast<int>(ps.stages.size()), m = ps.microbatches;

  // 1. Sub-microbatches: modules cut the same way share one split; each is a
  // min-max partition of the replica's slice by the modules' tokens, over
  // samples, or over items when every module of the split sees only those.
  std::map<std::vector<int>, int> split_index;  // counts -> split
  std::vector<std::vector<int>> split_modules;  // split -> module indices
  std::vector<int> split_of_module(model.modules.size(), -1);
  for (const auto& name : unit.modules) {
    const int mi = model.FindModule(name);
    auto [pos, inserted] = split_index.emplace(CountsOf(it, name, m), static_cast<int>(split_modules.size()));
    if (inserted) split_modules.emplace_back();
    split_modules[pos->second].push_back(mi);
    split_of_module[mi] = pos->second;
  }
  // parts[split][d] -> sub-microbatches (the pieces each runs)
  std::vector<std::vector<std::vector<std::vector<SamplePiece>>>> parts(
      split_modules.size(), std::vector<std::vector<std::vector<SamplePiece>>>(D));
  for (const auto& [counts, x] : split_index) {
    const bool by_item = std::all_of(split_modules[x].begin(), split_modules[x].end(),
                                     [&](int mi) { return ItemDrivenModule(model, mi); });
    for (int k = 0; k < m; ++k) {
      const auto slices = SplitEven(it.microbatch_samples[k], D);
      for (int d = 0; d < D; ++d) {
        std::vector<SamplePiece> pieces;  // what is cut: whole samples, or one item each
        for (int s : slices[d]) {
          if (!by_item) {
            pieces.push_back({s, -1});
            continue;
          }
          for (int i = 0; i < NumItems(batch.samples[s]); ++i) pieces.push_back({s, i});
        }
        if (counts[k] > std::max<int>(1, static_cast<int>(pieces.size()))) {
          throw Error(
              fmt::format("iteration schedule: module_sub_microbatches.{}: {} sub-microbatches of global "
                          "microbatch {}, but replica {} holds only {} {} of it",
                          model.modules[split_modules[x][0]].name, counts[k], k, d, pieces.size(),
                          by_item ? "images / clips" : "samples (samples are not split)"));
        }
        if (pieces.empty()) {
          parts[x][d].emplace_back();
          continue;
        }
        std::vector<double> weight;
        for (const SamplePiece& piece : pieces) {
          const auto t = CountModuleTokens(model, PieceSample(batch, piece));
          double w = 0;
          for (int mi : split_modules[x]) w += t[mi].tokens;
          weight.push_back(w);
        }
        const Partition cut = MinMaxPartition(weight, counts[k]);
        for (int j = 0; j < counts[k]; ++j) {
          parts[x][d].emplace_back(pieces.begin() + cut.begin[j], pieces.begin() + cut.begin[j + 1]);
        }
      }
    }
  }

  // 2. Per-layer recomputation: the schedule's (or the unit's), overridden per (stage, sub-microbatch).
  Recompute base = unit.recompute;
  if (it.recompute) base = *it.recompute;
  std::vector<int> stage_layers(S, 0);
  for (int s = 0; s < S; ++s) {
    for (const auto& r : ps.stages[s].layers) stage_layers[s] += r.end - r.begin;
  }
  std::map<std::pair<int, int>, const std::vector<Recompute>*> overrides;
  for (size_t i = 0; i < it.layer_recompute.size(); ++i) {
    const StageRecompute& r = it.layer_recompute[i];
    if (r.stage < 0 || r.stage >= S) {
      throw Error(fmt::format("iteration schedule: layer_recompute[{}]: stage {} is not in 0..{}", i, r.stage, S - 1));
    }
    const int mbs = static_cast<int>(stage_mb_global[r.stage].size());
    if (r.microbatch < 0 || r.microbatch >= mbs) {
      throw Error(fmt::format("iteration schedule: layer_recompute[{}]: stage {} runs sub-microbatches 0..{}, not {}",
                              i, r.stage, mbs - 1, r.microbatch));
    }
    if (static_cast<int>(r.layers.size()) != stage_layers[r.stage]) {
      throw Error(fmt::format("iteration schedule: layer_recompute[{}]: {} choices for the {} layers of stage {}", i,
                              r.layers.size(), stage_layers[r.stage], r.stage));
    }
    overrides[{r.stage, r.microbatch}] = &r.layers;
  }

  // 3. Stages, ranks and every replica's contents.
  out.replicated = true;
  out.ranks = TemplateRanks(plan, 0, 0, 0, unit.first_group, unit.name);
  for (int s = 0; s < S; ++s) {
    out.stages.push_back(StageOf(model, plan, 0, 0, 0, ps.stages[s]));
    out.stages.back().recompute = base;
  }
  out.replicas.assign(D, std::vector<std::vector<MicrobatchWork>>(S));
  for (int d = 0; d < D; ++d) {
    for (int s = 0; s < S; ++s) {
      const int x = split_of_module[model.FindModule(ps.stages[s].layers.front().module)];
      for (int j = 0; j < static_cast<int>(stage_mb_global[s].size()); ++j) {
        MicrobatchWork mb;
        mb.pieces = PieceList(parts[x][d][j]);
        auto found = overrides.find({s, j});
        if (found != overrides.end()) mb.layer_recompute = *found->second;
        out.replicas[d][s].push_back(std::move(mb));
      }
    }
  }

  // 4. The schedule: a chain of stages, each with its own sub-microbatches.
  Schedule& sch = out.schedule;
  sch.name = "woven";
  sch.num_ranks = P;
  sch.ranks.assign(P, {});
  sch.dag = true;
  for (int s = 0; s < S; ++s) {
    sch.stage_rank.push_back(ps.stages[s].rank);
    sch.stage_microbatches.push_back(static_cast<int>(stage_mb_global[s].size()));
    sch.num_microbatches = std::max(sch.num_microbatches, sch.stage_microbatches.back());
    if (s > 0) sch.edges.push_back(WovenEdge(s - 1, s, stage_mb_global[s - 1], stage_mb_global[s]));
  }
  if (!it.rank_orders.empty()) {
    if (static_cast<int>(it.rank_orders.size()) != P) {
      throw Error(fmt::format("iteration schedule: rank_orders has {} ranks, the plan's pipeline has {}",
                              it.rank_orders.size(), P));
    }
    for (int p = 0; p < P; ++p) {
      for (size_t i = 0; i < it.rank_orders[p].size(); ++i) {
        const StageStep& st = it.rank_orders[p][i];
        if (st.stage < 0 || st.stage >= S || sch.stage_rank[st.stage] != p ||
            st.microbatch >= sch.stage_microbatches[st.stage] || st.part != BackwardPart::kFused) {
          throw Error(
              fmt::format("iteration schedule: rank_orders[{}][{}]: {}:{}:{} is not a stage of rank {} with "
                          "that sub-microbatch, or not a forward or fused backward (woven orders fuse "
                          "backwards)",
                          p, i, st.forward ? 'F' : 'B', st.stage, st.microbatch, p));
        }
        sch.ranks[p].push_back(
            Action{st.forward ? ActionKind::kForward : ActionKind::kBackward, st.stage, st.microbatch});
      }
    }
  } else {  // GPipe order: forwards by (global microbatch, stage, sub-microbatch), backwards reversed
    std::vector<std::tuple<int, int, int>> fw;
    for (int s = 0; s < S; ++s) {
      for (int j = 0; j < sch.stage_microbatches[s]; ++j) fw.emplace_back(stage_mb_global[s][j], s, j);
    }
    std::sort(fw.begin(), fw.end());
    for (const auto& [k, s, j] : fw) sch.ranks[sch.stage_rank[s]].push_back(Action{ActionKind::kForward, s, j});
    for (auto f = fw.rbegin(); f != fw.rend(); ++f) {
      auto [k, s, j] = *f;
      sch.ranks[sch.stage_rank[s]].push_back(Action{ActionKind::kBackward, s, j});
    }
  }
  AddPointToPoint(sch);
}

}  // namespace loom
