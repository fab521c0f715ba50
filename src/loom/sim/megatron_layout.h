// The Megatron-LM layout of a multimodal model (issue 3's placement until
// plan/ generalizes it): every module's layers in one pipeline, encoders in the
// first stages, all with the backbone's TP, CP and DP (a module whose heads
// do not divide by TP is replicated inside the TP group instead). Layers are cut into
// pp x vpp contiguous stages by the min-max partitioner on their mean
// forward + backward time, and the global batch is split into DP replicas and
// microbatches in order. BuildMegatronSimulation prices every (stage,
// microbatch) with cost/ and returns what Simulator takes. Ranks are laid out
// TP-fastest, then CP, DP, PP (Megatron's order).
#pragma once

#include <string>
#include <vector>

#include "loom/cost/layer_work.h"
#include "loom/data/sample.h"
#include "loom/pipeline/partition.h"
#include "loom/pipeline/schedule.h"
#include "loom/cost/layer_pricing.h"
#include "loom/sim/pipeline_costs.h"
#include "loom/sim/simulator.h"
#include "loom/spec/cluster.h"
#include "loom/spec/model.h"
#include "loom/spec/workload.h"

namespace loom {

struct ParallelConfig {
  int tp = 1, pp = 1, dp = 1, cp = 1, vpp = 1;
  int microbatches = 1;           // per DP replica per iteration
  std::string schedule = "1f1b";  // gpipe | 1f1b | interleaved | zb-h1
  Recompute recompute = Recompute::kNone;
  SimOptions sim;

  // Throws loom::Error naming each factor and what would be valid: the product
  // must equal the cluster's GPUs, TP must fit in a node, heads divide by TP,
  // the global batch must split into dp x microbatches, the model must have at
  // least pp x vpp layers.
  void Validate(const Model& model, const Cluster& cluster, const Workload& workload) const;
};

struct MegatronSimulation {
  Schedule schedule;
  std::vector<PipelineCosts> replicas;  // distinct DP replicas only (identical ones merged)
  std::vector<int> replica_weight;      // how many DP replicas each simulated one stands for
  std::vector<std::pair<int, int>> layers;  // flat layer list: (module, layer)
  Partition partition;                  // over `layers`, pp x vpp stages
  double model_flops = 0;               // useful FLOPs of the whole global batch
  int num_gpus = 0;
};

MegatronSimulation BuildMegatronSimulation(const Model& model, const Cluster& cluster, const Workload& workload,
                                           const ParallelConfig& config, const Batch& batch);

// Names of the stages' contents, "vision[0:32]+projector" style, for reports.
std::vector<std::string> StageLabels(const Model& model, const MegatronSimulation& sim);

}  // namespace loom
