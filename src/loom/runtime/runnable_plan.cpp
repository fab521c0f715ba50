#include "loom/runtime/runnable_plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "loom/cost/layer_pricing.h"
#include "loom/error.h"
#include "loom/pipeline/validate.h"
#include "loom/plan/compile_plan.h"
#include "loom/runtime/packing.h"
#include "loom/runtime/process_layout.h"
#include "loom/runtime/runnable_layers.h"

namespace loom::runtime {

std::map<std::pair<int, int>, LossModuleEnds> LossModuleEndsOf(const Model& model, const ExecutionPlan& exec) {
  std::map<std::pair<int, int>, LossModuleEnds> out;
  const Module& lm = model.modules.back();
  for (size_t v = 0; v < exec.stages.size(); ++v) {
    const ExecStage& st = exec.stages[v];
    for (const auto& r : st.layers) {
      if (r.module != lm.name) continue;
      LossModuleEnds& ends = out[{st.unit, st.replica}];
      if (r.begin == 0) ends.embedding_stage = static_cast<int>(v);
      if (r.end == static_cast<int>(lm.layers.size())) ends.head_stage = static_cast<int>(v);
    }
  }
  return out;
}

std::string DropSequenceParallelism(Plan& plan) {
  std::vector<std::string> units;
  for (Unit& u : plan.units) {
    bool tp = u.tp > 1;
    for (const auto& ps : u.pipelines) {
      for (const auto& st : ps.stages) tp = tp || st.tp > 1;
    }
    if (!tp || u.cp < 2 || !u.sequence_parallel) continue;
    u.sequence_parallel = false;
    units.push_back(u.name);
  }
  if (units.empty()) return "";
  return fmt::format(
      "sequence parallelism beside context parallelism is not run yet: unit(s) {} run TP with each norm's "
      "and residual's rows whole on every TP rank, and the prediction is the plan's without it (what "
      "Megatron-LM's --sequence-parallel saves is not saved)",
      fmt::join(units, ", "));
}

std::string WhyNoWholeLayers(const Model& model, const Plan& plan, Precision precision) {
  if (precision == Precision::kFp16) return "fp16's loss scale is carried in checkpoints only";
  if (plan.units.size() != 1) return fmt::format("the plan has {} units", plan.units.size());
  const Unit& u = plan.units[0];
  bool tp = u.tp > 1;
  for (const auto& ps : u.pipelines) {
    for (const auto& st : ps.stages) tp = tp || st.tp > 1;
  }
  if (tp) return "tensor parallelism slices its layers";
  if (u.cp > 1) return "context parallelism";  // whole layers, but not run under the copy yet
  if (u.zero_stage != 0) {
    return fmt::format("unit {} shards its optimizer state over its replicas (zero_stage {})", u.name, u.zero_stage);
  }
  for (const auto& m : model.modules) {
    if (!m.layers.empty() && m.layers.back().kind == LayerKind::kLmHead && m.layers.back().tied) {
      return fmt::format("module {} ties its LM head to its embedding", m.name);
    }
  }
  return "";
}

namespace {

// Under TP a token table and the LM head hold their vocabulary rows
// (torch_model.h TensorParallel): a head tied to the embedding of another
// stage sums its gradient with that stage's rows shard by shard, so the two
// stages must split the vocabulary alike.
void CheckTiedStagesSplitAlike(const Model& model, const ExecutionPlan& exec) {
  const Module& lm = model.modules.back();
  if (lm.layers.empty() || lm.layers.back().kind != LayerKind::kLmHead || !lm.layers.back().tied) return;
  for (const auto& [key, ends] : LossModuleEndsOf(model, exec)) {
    if (ends.embedding_stage < 0 || ends.head_stage < 0) continue;
    const ExecStage &e = exec.stages[ends.embedding_stage], &h = exec.stages[ends.head_stage];
    if (e.tp != h.tp) {
      throw Error(
          fmt::format("runtime: module {} ties its LM head (stage {}, tp {}) to its embedding (stage {}, tp {}); "
                      "TP splits both by vocabulary rows, so the two stages need one tp (or untie the head: "
                      "tie_word_embeddings false)",
                      lm.name, h.label, h.tp, e.label, e.tp));
    }
  }
}

}  // namespace

ExecutionPlan CompileForRuntime(const Model& model, const Cluster& cluster, const Workload& workload, const Plan& plan,
                                const Batch& batch, const IterationSchedule* it) {
  for (const Unit& u : plan.units) {
    if (u.pipelines.size() != 1) {
      // Oobleck's heterogeneous templates: gradients are summed layer by layer
      // over every process holding the layer (the worker's layer segments),
      // with a replicated optimizer; TP, CP and ZeRO sharding inside are not
      // run yet.
      bool tp = u.tp > 1;
      for (const auto& ps : u.pipelines) {
        for (const auto& st : ps.stages) tp = tp || st.tp > 1;
      }
      if (plan.units.size() > 1 || tp || u.cp > 1 || u.zero_stage > 1) {
        throw Error(
            fmt::format("runtime: unit {} has {} pipeline templates with {}; Oobleck's heterogeneous "
                        "templates run alone, without TP, CP or ZeRO-2/3",
                        u.name, u.pipelines.size(),
                        plan.units.size() > 1 ? "other units"
                        : tp                  ? "tensor parallelism"
                        : u.cp > 1            ? "context parallelism"
                                              : fmt::format("zero_stage {}", u.zero_stage)));
      }
    }
    // SM quotas (Mosaic): on a CPU the units sharing a process run one after
    // another in its order (the quota only shapes the prediction); on CUDA a
    // one-process run puts them on green-context streams (green_context.h),
    // and run.cpp refuses several units per GPU across processes.
    for (const auto& name : u.modules) {
      if (!SplitsOverTensorParallel(model.modules[model.FindModule(name)], u.tp)) {
        throw Error(
            fmt::format("runtime: module {} does not split over tp {} (its heads do not divide); "
                        "replicating it inside the TP group is not run yet",
                        name, u.tp));
      }
    }
  }
  if (it != nullptr && !it->deferred.empty()) {
    throw Error(
        fmt::format("runtime: the iteration schedule defers {} sample(s) to the next iteration; deferral is "
                    "not run yet",
                    it->deferred.size()));
  }
  ExecutionPlan exec = CompilePlan(model, cluster, workload, plan, batch, it);
  const auto towers = TowerEnds(model, exec);
  for (size_t v = 0; v < exec.stages.size(); ++v) {
    if (exec.stages[v].cp > 1 && !towers[v].empty()) {
      throw Error(
          fmt::format("runtime: stage {} ends module {}, a tower no module reads, under context parallelism "
                      "{}; its surrogate loss over gathered rows is not run yet",
                      exec.stages[v].label, model.modules[towers[v].front()].name, exec.stages[v].cp));
    }
  }
  for (const auto& st : exec.stages) {
    if (st.cp > 1 && st.seq_share > 1) {
      throw Error(
          fmt::format("runtime: stage {} runs context parallelism {} and shares sequences over {} more GPUs "
                      "of its group; both at once is not run yet (use groups of tp x cp GPUs)",
                      st.label, st.cp, st.seq_share));
    }
    CheckRunnable(model, st.layers);
  }
  for (const auto& e : exec.schedule.StageEdges()) {
    const ExecStage &a = exec.stages[e.from], &b = exec.stages[e.to];
    if (exec.schedule.stage_rank[e.from] == exec.schedule.stage_rank[e.to] &&
        (a.tp != b.tp || a.seq_share != b.seq_share)) {
      throw Error(
          fmt::format("runtime: stages {} and {} of one rank split their group differently (tp {} / {}, "
                      "sequence shares {} / {}); that is not run yet",
                      a.label, b.label, a.tp, b.tp, a.seq_share, b.seq_share));
    }
    if (a.cp > 1 && a.tp != b.tp) {
      throw Error(
          fmt::format("runtime: stages {} and {} run context parallelism at different tp ({} / {}); that is "
                      "not run yet",
                      a.label, b.label, a.tp, b.tp));
    }
  }
  CheckTiedStagesSplitAlike(model, exec);
  // Units may differ in context parallelism (Cornstarch: a CP LLM fed by
  // encoders sharing their groups' sequences), but the stages one GPU group
  // runs share one.
  const ProcessLayout placed = LayoutProcesses(exec);  // throws for what it cannot place
  for (size_t g = 0; g < placed.of_group.size(); ++g) {
    int cp = -1, first = -1;
    for (const RankCopy& c : placed.of_group[g]) {
      for (int v = 0; v < exec.schedule.num_stages(); ++v) {
        if (exec.schedule.stage_rank[v] != c.rank) continue;
        if (cp < 0) {
          cp = exec.stages[v].cp;
          first = v;
        } else if (exec.stages[v].cp != cp) {
          throw Error(
              fmt::format("runtime: GPU group {} runs stages {} (cp {}) and {} (cp {}); stages of different "
                          "context parallelism on one group are not run yet",
                          g, exec.stages[first].label, cp, exec.stages[v].label, exec.stages[v].cp));
        }
      }
    }
  }
  StageOutputs(model, exec);
  // The inputs are ones the runtime packs, and every packed sequence fits
  // the learned position table of each layer that has one (a ViT's 257
  // positions, GPT-2's 1024): a longer one is named here, not by libtorch in a worker.
  std::vector<int64_t> longest(model.modules.size(), 0);
  for (const auto& stages : exec.replicas) {
    for (const auto& mbs : stages) {
      for (const auto& mb : mbs) {
        const MicrobatchPacking packing = PackMicrobatch(model, batch, mb.pieces);
        for (size_t mi = 0; mi < model.modules.size(); ++mi) {
          for (int64_t len : packing.Lengths(static_cast<int>(mi))) longest[mi] = std::max(longest[mi], len);
        }
      }
    }
  }
  for (size_t mi = 0; mi < model.modules.size(); ++mi) {
    const Module& m = model.modules[mi];
    for (size_t li = 0; li < m.layers.size(); ++li) {
      const Layer& l = m.layers[li];
      if (l.rope.max_positions > 0 && longest[mi] > l.rope.max_positions) {
        throw Error(fmt::format(
            "model {}: module {} packs a sequence of {} tokens, but its layer {} was made for {} positions "
            "(rope_max_positions, config.json's max_position_embeddings); valid: sequences of at most {} tokens "
            "(the workload's seq_len or pack_tokens, the samples' lengths)",
            model.source, m.name, longest[mi], li, l.rope.max_positions, l.rope.max_positions));
      }
      if (l.positions > 0 && longest[mi] > l.positions) {
        throw Error(
            fmt::format("model {}: module {} packs a sequence of {} tokens, but its layer {} ({}) has {} "
                        "learned positions; valid: positions >= {}, or shorter sequences (the workload's "
                        "seq_len or pack_tokens, the samples' lengths)",
                        model.source, m.name, longest[mi], li, LayerKindName(l.kind), l.positions, longest[mi]));
      }
    }
  }
  return exec;
}

}  // namespace loom::runtime
