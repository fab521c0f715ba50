// The stage flows of one batch (PipeWeaver §5, Fig. 6a): every forward and
// backward stage of every (pipeline stage, sub-microbatch), with its rank,
// duration, the activation memory it holds from forward to backward, the
// stages it waits for (with the point-to-point time of each edge that crosses
// ranks), and its pipeline segment group: (modality module, global
// microbatch). What the ranking, the interleaving, layer tuning and the full
// ILP work on. Plain value; built once per batch.
#pragma once

#include <vector>

#include "loom/pipeline/schedule.h"
#include "loom/sim/pipeline_costs.h"

namespace loom {

struct FlowStage {
  bool forward = true;
  int rank = 0;
  int stage = 0;       // pipeline stage of the plan's template
  int microbatch = 0;  // the stage's sub-microbatch
  int module = 0;      // modality module (index into the partition)
  int global_mb = 0;
  double time_s = 0;
  double activation_bytes = 0;                // held from the forward's start to the backward's end
  std::vector<std::pair<int, double>> preds;  // (flow stage, transfer time after it ends)
};

struct StageFlow {
  int num_ranks = 0;
  int num_modules = 0;       // modality modules, in pipeline order
  int num_microbatches = 0;  // global microbatches
  std::vector<FlowStage> stages;
  std::vector<std::vector<int>> forward_id, backward_id;  // [stage][sub-mb] -> flow stage
  std::vector<double> capacity_bytes;                     // per rank: memory left for activations
  int group(int module, int global_mb) const { return global_mb * num_modules + module; }
  int num_groups() const { return num_modules * num_microbatches; }
  // A ranking orders 2 x num_groups() events: each group's forward segments
  // (event g) and its backward segments (event num_groups() + g). Within a
  // microbatch they must come as its dependencies go: forwards by module,
  // then backwards by module in reverse. Event `step` (0 .. 2 x modules - 1)
  // of microbatch k:
  int event(int step, int global_mb) const {
    return step < num_modules ? group(step, global_mb) : num_groups() + group(2 * num_modules - 1 - step, global_mb);
  }
  int num_events() const { return 2 * num_groups(); }
  // Per rank, the sum of its stage times: a lower bound on the makespan.
  std::vector<double> RankBusy_s() const;
};

// From a compiled woven plan's schedule and one replica's costs. `stage_module[s]`
// is the modality module of template stage s (non-decreasing);
// `stage_mb_global` as WovenStageMicrobatches returns it. Capacity per rank:
// `gpu_mem_bytes` minus its static bytes and its largest transient.
StageFlow BuildStageFlow(const Schedule& schedule, const PipelineCosts& costs, const std::vector<int>& stage_module,
                         const std::vector<std::vector<int>>& stage_mb_global, double gpu_mem_bytes);

}  // namespace loom
