// Hand-built stage flows for the PipeWeaver tests: `modules` in pipeline
// order, module i with K_i segments (P x K_i stages, stage v on rank v % P)
// and M_i sub-microbatches per global microbatch, joined as woven schedules
// join them (many to many inside each global microbatch: every consumer
// sub-microbatch of k reads every producer sub-microbatch of k and sends each
// its gradient). Built through a Schedule and BuildStageFlow, so the
// flow code is exercised too.
#pragma once

#include <algorithm>
#include <random>
#include <vector>

#include "loom/plan/compile_plan.h"
#include "loom/sim/pipeline_costs.h"
#include "loom/strategies/pipeweaver/stage_flow.h"

namespace loom {

struct FlowModule {
  int segments = 1;          // K_i
  int sub_microbatches = 1;  // M_i
  double forward_s = 1, backward_s = 2, activation_bytes = 1;
};

// `jitter` > 0 scales each (stage, sub-microbatch) time by a factor in
// [1 - jitter, 1 + jitter] drawn from `seed`.
inline StageFlow MakeFlow(int P, const std::vector<FlowModule>& modules, int m, double transfer_s = 0,
                          double capacity_bytes = 1e18, double jitter = 0, unsigned seed = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(1 - jitter, 1 + jitter);
  Schedule sch;
  sch.num_ranks = P;
  sch.dag = true;
  PipelineCosts pc;
  pc.p2p = Link{1.0, transfer_s};  // zero-byte sends: the transfer is the latency
  pc.static_bytes.assign(P, 0.0);
  std::vector<int> stage_module;
  std::vector<std::vector<int>> stage_mb_global;
  for (size_t i = 0; i < modules.size(); ++i) {
    const FlowModule& mod = modules[i];
    for (int c = 0; c < P * mod.segments; ++c) {
      const int s = sch.num_stages();
      sch.stage_rank.push_back(s % P);
      sch.stage_microbatches.push_back(m * mod.sub_microbatches);
      stage_module.push_back(static_cast<int>(i));
      stage_mb_global.emplace_back();
      pc.stage.emplace_back();
      for (int k = 0; k < m; ++k) {
        for (int r = 0; r < mod.sub_microbatches; ++r) {
          stage_mb_global.back().push_back(k);
          StageCost sc;
          sc.forward_s = mod.forward_s * (jitter > 0 ? u(rng) : 1);
          sc.backward_data_s = mod.backward_s * (jitter > 0 ? u(rng) : 1);
          sc.activation_bytes = mod.activation_bytes;
          pc.stage.back().push_back(sc);
        }
      }
      pc.grad_sync_s.push_back(0);
      if (s > 0) sch.edges.push_back(WovenEdge(s - 1, s, stage_mb_global[s - 1], stage_mb_global[s]));
    }
  }
  sch.num_microbatches = *std::max_element(sch.stage_microbatches.begin(), sch.stage_microbatches.end());
  return BuildStageFlow(sch, pc, stage_module, stage_mb_global, capacity_bytes);
}

}  // namespace loom
