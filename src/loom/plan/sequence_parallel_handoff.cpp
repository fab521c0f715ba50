#include "loom/plan/sequence_parallel_handoff.h"

#include "loom/cost/layer_pricing.h"

namespace loom {

namespace {

bool SplitsRows(const ExecStage& st) { return st.sequence_parallel && st.tp > 1 && st.cp == 1 && st.seq_share == 1; }

// Whether `edge`, its producer's only edge out and its consumer's only edge
// in, carries the TP ranks' rows.
bool HandsOnRows(const Model& model, const ExecutionPlan& exec, const StageEdge& edge) {
  if (!edge.first.empty() || !edge.producers.empty() || edge.share != 1.0) return false;
  const ExecStage& u = exec.stages.at(static_cast<size_t>(edge.from));
  const ExecStage& w = exec.stages.at(static_cast<size_t>(edge.to));
  if (!SplitsRows(u) || !SplitsRows(w) || u.tp != w.tp || u.unit != w.unit) return false;
  if (u.layers.empty() || w.layers.empty()) return false;
  const LayerRange& last = u.layers.back();
  const LayerRange& first = w.layers.front();
  if (last.module != first.module || first.begin != last.end || last.end <= 0) return false;
  const int mi = model.FindModule(last.module);
  const Module& m = model.modules[static_cast<size_t>(mi)];
  if (last.end >= static_cast<int>(m.layers.size())) return false;
  // After a transformer layer the rows are split already; after the token
  // embedding Megatron splits them too (LanguageModelEmbedding's
  // scatter_to_sequence_parallel_region), so the first block receives them so.
  const LayerKind out = m.layers[static_cast<size_t>(last.end - 1)].kind;
  if ((out != LayerKind::kTransformer && out != LayerKind::kEmbedding) ||
      m.layers[static_cast<size_t>(first.begin)].kind != LayerKind::kTransformer) {
    return false;
  }
  if (!SplitsOverTensorParallel(m, u.tp)) return false;  // replicated over the group: whole rows on each rank
  // An earlier module read by a later one crosses the cut too (runtime/packing.h CrossingAfter).
  for (size_t i = static_cast<size_t>(mi) + 1; i < model.modules.size(); ++i) {
    for (int p : model.modules[i].inputs) {
      if (p < mi) return false;
    }
  }
  return true;
}

}  // namespace

SequenceParallelHandoffs SequenceParallelHandoffsOf(const Model& model, const ExecutionPlan& exec) {
  const int S = exec.schedule.num_stages();
  SequenceParallelHandoffs h{std::vector<bool>(S, false), std::vector<bool>(S, false)};
  const std::vector<StageEdge> edges = exec.schedule.StageEdges();  // the chain where the schedule lists none
  std::vector<int> outs(S, 0), ins(S, 0);
  for (const StageEdge& e : edges) {
    ++outs[e.from];
    ++ins[e.to];
  }
  for (const StageEdge& e : edges) {
    if (outs[e.from] == 1 && ins[e.to] == 1 && HandsOnRows(model, exec, e)) h.out[e.from] = h.in[e.to] = true;
  }
  return h;
}

}  // namespace loom
