// Entrain's heterogeneous model-parallel configuration search (seed 004
// §4.4.3, Algorithm 3), the analytic part: for one data-parallel degree and
// one proportional GPU split M_i per component (profiling_batch.h), every
// component's TP_i x CP_i x PP_i = M_i is priced by
//   Tier 1, intra-module balance (Eq. 4.1): the min-max contiguous partition
//     of the component's per-layer times into PP_i stages (pipeline/
//     partition.h, Loom's one DP); beta_i = its slowest stage, tau_{i,p} the
//     stage times;
//   Tier 2 (Eq. 4.2, Alpa-style): T_S = sum_i sum_p tau_{i,p} + (K - 1) beta_max
//     plus the resharding cost P_reshard where adjacent components' (TP, CP)
//     differ: K times one microbatch's boundary activation over the link
//     (the thesis names ComputeReshardCost(TP, CP, K, B, DP) and no formula;
//     Loom's is the all-to-all of the boundary tensor, once per microbatch,
//     both directions counted: activation forward, its gradient backward).
// Throughput = DP K / T_iter. tau includes forward and backward (1F1B). The
// memory check is the simulator's (strategies/entrain/entrain.cpp confirms
// the best candidates with it); here only whether a stage's model states fit.
// Plain values; deterministic (ties keep enumeration order).
#pragma once

#include <vector>

namespace loom {

// One component at one (TP, CP): what Eq. 4.1 partitions.
struct ComponentOption {
  int tp = 1, cp = 1;
  std::vector<double> layer_s;      // per layer: forward + backward of one mean microbatch (T_{j,i})
  std::vector<double> state_bytes;  // per layer: weights, gradients and optimizer state per GPU
};

struct ConfigProblem {
  int microbatches = 1;                               // K = B_global / (DP mu)
  int group_gpus = 1;                                 // TP x CP of every component (a GPU group)
  std::vector<int> gpus;                              // M_i per component (multiples of group_gpus)
  std::vector<std::vector<ComponentOption>> options;  // [component][option]
  std::vector<double> reshard_s;  // [boundary i -> i+1]: one microbatch's resharding when (TP, CP) differ
  double gpu_mem_bytes = 0;       // 0: no state check
};

struct ComponentChoice {
  int option = 0;
  int tp = 1, cp = 1, pp = 1;
  std::vector<int> stage_layers;  // layers per stage (Eq. 4.1's backtracking)
  std::vector<double> stage_s;    // tau_{i,p}
  double beta_s = 0;              // max_p tau_{i,p}
};

struct EntrainConfig {
  std::vector<ComponentChoice> components;
  double pipeline_s = 0;  // Eq. 4.2's T_S
  double reshard_s = 0;   // P_reshard
  double iteration_s() const { return pipeline_s + reshard_s; }
  double throughput = 0;  // microbatches per second of one replica: K / T_iter (x DP for the cluster)
};

// Eq. 4.1 + 4.2 for one choice of option per component. Returns false when a
// component has fewer layers than stages or a stage's states overflow.
bool EvaluateConfig(const ConfigProblem& p, const std::vector<int>& option, EntrainConfig& out);

// Every combination of options, feasible ones by descending throughput.
std::vector<EntrainConfig> SearchConfigs(const ConfigProblem& p);

}  // namespace loom
