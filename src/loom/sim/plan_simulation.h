// Turns a Plan and one batch into what the Simulator runs: one schedule over
// a stage DAG and its costs (docs/plan-format.md, "Execution"). Every unit's
// pipeline replicas become simulated ranks (one per GPU group and unit), joined
//   - inside a replica by the chain of its stages,
//   - across units by broker edges from each producing replica to the
//     consuming replicas that share its samples,
//   - across temporal phases on shared groups by barriers (the later phase's
//     first forward waits for the earlier phase's last forward, and the
//     earlier phase's first backward for the later phase's last backward),
//   - across replicas by layer-wise gradient sync.
// A plan with one unit and one pipeline template is simulated the Megatron way:
// one set of pipeline ranks, identical DP replicas merged.
#pragma once

#include <string>
#include <vector>

#include "loom/data/sample.h"
#include "loom/pipeline/schedule.h"
#include "loom/plan/plan.h"
#include "loom/sim/pipeline_costs.h"
#include "loom/sim/simulator.h"
#include "loom/spec/cluster.h"
#include "loom/spec/model.h"
#include "loom/spec/workload.h"

namespace loom {

struct SimRankInfo {
  int unit = 0;
  int pipeline = 0;
  int replica = 0;      // within the pipeline template
  int pp_rank = 0;
  int group = 0;        // GPU group it runs on
  double sm_fraction = 1;
  std::string name;     // "llm p0 r1 pp2"
};

struct PlanSimulation {
  Schedule schedule;
  std::vector<PipelineCosts> replicas;  // >1 only when deduplicated
  std::vector<int> replica_weight;      // DP replicas each simulated replica stands for
  bool deduplicated = false;            // one unit, one template: ranks stand for every DP replica
  std::vector<SimRankInfo> ranks;       // per simulated rank of the schedule
  std::vector<std::string> stage_labels;
  std::vector<int> stage_unit;
  int num_groups = 0;                   // groups of the cluster
  double model_flops = 0;               // useful FLOPs of the iteration
  int64_t samples = 0;                  // samples trained this iteration (deferred ones excluded)
  double tokens = 0;                    // the busiest module's tokens this iteration
};

// Throws loom::Error when the plan is invalid (every violation listed) or the
// iteration schedule does not match it.
// `layer_options`, when not null, receives per-layer prices under every
// recomputation choice; only woven schedules fill it (sim/woven_simulation.h).
struct LayerOptions;
PlanSimulation BuildPlanSimulation(const Model& model, const Cluster& cluster, const Workload& workload,
                                   const Plan& plan, const Batch& batch, const IterationSchedule* iteration = nullptr,
                                   LayerOptions* layer_options = nullptr);

}  // namespace loom
