#include "loom/strategies/pipeweaver/stage_flow.h"

#include <algorithm>

#include "loom/cost/collectives.h"

namespace loom {

std::vector<double> StageFlow::RankBusy_s() const {
  std::vector<double> busy(num_ranks, 0.0);
  for (const auto& st : stages) busy[st.rank] += st.time_s;
  return busy;
}

StageFlow BuildStageFlow(const Schedule& sch, const PipelineCosts& pc, const std::vector<int>& stage_module,
                         const std::vector<std::vector<int>>& stage_mb_global, double gpu_mem_bytes) {
  const int S = sch.num_stages();
  StageFlow f;
  f.num_ranks = sch.num_ranks;
  f.num_modules = stage_module.empty() ? 1 : stage_module.back() + 1;
  f.forward_id.assign(S, {});
  f.backward_id.assign(S, {});
  std::vector<double> transient(sch.num_ranks, 0.0);
  for (bool forward : {true, false}) {
    for (int s = 0; s < S; ++s) {
      for (int j = 0; j < sch.microbatches_of(s); ++j) {
        const StageCost& c = pc.at(s, j);
        FlowStage st;
        st.forward = forward;
        st.rank = sch.stage_rank[s];
        st.stage = s;
        st.microbatch = j;
        st.module = stage_module[s];
        st.global_mb = stage_mb_global[s][j];
        f.num_microbatches = std::max(f.num_microbatches, st.global_mb + 1);
        st.time_s = forward ? c.forward_s : c.backward_data_s + c.backward_weight_s;
        st.activation_bytes = c.activation_bytes;
        transient[st.rank] = std::max(transient[st.rank], c.transient_bytes);
        (forward ? f.forward_id : f.backward_id)[s].push_back(static_cast<int>(f.stages.size()));
        f.stages.push_back(std::move(st));
      }
    }
  }
  auto hop = [&](int from, int to, int s, int j) {
    return sch.stage_rank[from] == sch.stage_rank[to] ? 0.0 : P2PTime_s(pc.at(s, j).send_bytes, pc.p2p);
  };
  for (const StageEdge& e : sch.StageEdges()) {
    for (int k = 0; k < sch.microbatches_of(e.to); ++k) {
      for (int j : Producers(e, k)) {
        // Forward k at `to` needs forward j at `from`; backward j at `from` needs backward k at `to`.
        const double t = hop(e.from, e.to, e.from, j);
        f.stages[f.forward_id[e.to][k]].preds.push_back({f.forward_id[e.from][j], t});
        f.stages[f.backward_id[e.from][j]].preds.push_back({f.backward_id[e.to][k], t});
      }
    }
  }
  for (int s = 0; s < S; ++s) {
    for (int j = 0; j < sch.microbatches_of(s); ++j)
      f.stages[f.backward_id[s][j]].preds.push_back({f.forward_id[s][j], 0.0});
  }
  f.capacity_bytes.assign(sch.num_ranks, gpu_mem_bytes);
  for (int r = 0; r < sch.num_ranks; ++r) f.capacity_bytes[r] -= pc.static_bytes[r] + transient[r];
  return f;
}

}  // namespace loom
