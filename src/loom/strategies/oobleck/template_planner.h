// Oobleck §2.4.1.2: the layer partition and GPU-to-stage mapping of one
// pipeline template, by divide and conquer over the 1F1B critical path.
//
// A template of n nodes of M GPUs runs S stages; stage k holds layers
// [b_k, b_{k+1}) on d_k GPUs of one node (stages never span nodes; the
// GPUs of a stage share each microbatch's sequences, as Oobleck's FSDP
// stages split the data), so its time per microbatch is
// t_k = Σ_l (F_{l,d_k} + B_{l,d_k}). The critical path of 1F1B with N_b
// microbatches is T1 + T2 + T3 (Fig. 2.5, Eq. 2.1-2.4) with k* the slowest
// stage (the first of equals):
//   T1 = Σ_k t_k                      (warm-up and tear-down),
//   T2 = (N_b - S + k* - 1) t_k*      (the slowest stage's steady phase),
//   T3 = Σ_{k >= k*} t_k              (the steady phase after it),
// with N_b = 4 S while planning (GPipe's rule that bubbles are negligible
// there; the thesis' choice). Divide: a sub-problem (S' stages, layers [u,
// v), GPUs) splits into (s stages, layers [u, k), the first m GPUs) and the
// rest, the layer split at k for both halves (Eq. 2.1 writes k + 1 for the
// second half on a half-open range: the erratum, fixed); the halves combine
// by Eq. 2.1-2.3 and each sub-problem keeps its best by its own T1 + T2 + T3
// (N_b = 4 S' of the sub-problem, so sub-results are shared across
// templates: the thesis' memoisation). GPUs split at node boundaries while a
// sub-problem spans nodes (the first half takes whole nodes; any split of the
// layers into per-node suffixes is reachable this way) and at any GPU inside
// a node: O(n) node splits and O(M) GPU splits (§2.4.1.2's complexity
// argument). Conquer (Eq. 2.4): one stage on d GPUs of one node.
//
// Memory (LayerMemory): a single stage that cannot hold even one microbatch
// is no option; a node's stages are checked with their real in-flight counts
// when the node is placed (the suffix after it fixes them), and a node whose
// best split overflows is skipped, not re-split: a heuristic that can miss a
// slower split that fits.
//
// Not exact: a sub-problem keeps one best, and a different one could combine
// better. tests/strategies/oobleck_test.cpp measures it against brute force
// over every partition of small instances.
#pragma once

#include <cstdint>
#include <vector>

namespace loom::oobleck {

// F_{l,d} + B_{l,d}: one microbatch's forward and backward of layer l on d
// GPUs of a node (d = 1 .. M), seconds; time_s[l][d - 1]; infinite where a
// stage cannot use d GPUs.
struct LayerCosts {
  std::vector<std::vector<double>> time_s;
  int layers() const { return static_cast<int>(time_s.size()); }
  int max_gpus() const { return time_s.empty() ? 0 : static_cast<int>(time_s[0].size()); }
};

// What a stage keeps per GPU (optional): layer l's training state on each of
// d GPUs, and one microbatch's activations there; a stage fits when its
// state plus its in-flight microbatches' activations (1F1B: stage k of S
// holds S - k) fit `capacity_bytes`. Empty: memory is not checked.
struct LayerMemory {
  std::vector<std::vector<double>> state_bytes;       // [l][d - 1]
  std::vector<std::vector<double>> activation_bytes;  // [l][d - 1]
  double capacity_bytes = 0;
  bool empty() const { return state_bytes.empty(); }
};

struct TemplateStage {
  int begin = 0, end = 0;  // layers [begin, end)
  int node = 0;            // 0 .. nodes - 1 within the template
  int gpus = 1;            // of that node
  double time_s = 0;       // per microbatch, forward + backward
};

struct PipelineTemplate {
  int nodes = 0;
  std::vector<TemplateStage> stages;  // in pipeline order; nodes in order, every GPU of each used
  double planned_s = 0;               // T1 + T2 + T3 at N_b = 4 S
  int num_stages() const { return static_cast<int>(stages.size()); }
  // T1 + T2 + T3 with `microbatches` (the instantiated N_b).
  double IterationTime_s(int microbatches) const;
};

// 1F1B critical path of stage times with N_b microbatches (T1 + T2 + T3).
double CriticalPath_s(const std::vector<double>& stage_s, int microbatches);

// Plans templates of any node count over the same layers; the memo persists
// across calls (§2.4.1.2: later templates reuse the earlier ones' work).
// Not thread-safe.
class TemplatePlanner {
 public:
  TemplatePlanner(LayerCosts times, int gpus_per_node, LayerMemory memory = {});
  // The best template on `nodes` nodes over S in [nodes, min(L, nodes · M)].
  // Throws loom::Error when the layers cannot fill the nodes (L < nodes).
  PipelineTemplate Plan(int nodes);
  int64_t memo_entries() const { return computed_; }  // sub-problems solved so far

  // Summary of a partial pipeline: what Eq. 2.1-2.3 combine.
  struct Part {
    double t1 = 0;     // Σ t
    double tail = 0;   // Σ t from the slowest stage on (T3)
    double slow = -1;  // slowest stage time; < 0: infeasible
    int k_star = 0;    // its index in the part
    int stages = 0;
    int split = -1;  // the (s, k, m) of the best divide; -1: a single stage (conquer)
    int split_layer = 0, split_units = 0;
    double Cost() const;  // T1 + T2 + T3 at N_b = 4 · stages
  };

 private:
  // Layers [u, v) in `stages` stages on `gpus` GPUs of one node; the divide
  // peels the first stage (its layers and GPUs).
  const Part& OnGpus(int stages, int u, int v, int gpus);
  // Layers [u, L) in `stages` stages on `nodes` whole nodes; the divide peels
  // the first node (its stages and layers).
  const Part& OnNodes(int stages, int u, int nodes);
  static Part Combine(const Part& a, const Part& b);
  void EmitGpus(int stages, int u, int v, int gpus, int node, std::vector<TemplateStage>* out);
  void EmitNodes(int stages, int u, int nodes, int node, std::vector<TemplateStage>* out);

  // Whether node-prefix OnGpus(stages, u, v, M) fits with `after` stages
  // behind it in the pipeline.
  bool NodeFits(int stages, int u, int v, int after);
  bool StageFits(int u, int v, int gpus, int in_flight) const;

  LayerCosts times_;
  LayerMemory memory_;
  std::vector<std::vector<double>> state_prefix_, act_prefix_;  // [d - 1][l]
  int gpus_per_node_;
  int layers_;
  std::vector<std::vector<double>> prefix_;  // prefix_[d - 1][l]: Σ of time_s[0..l)[d - 1]
  // Flat memo tables (computed entries have stages > 0); the node table grows
  // with the largest template asked for.
  std::vector<Part> gpu_memo_;   // [stages][u][v][gpus]
  std::vector<Part> node_memo_;  // [stages][u][nodes]
  int memo_nodes_ = 0;
  int64_t computed_ = 0;
};

// Every partition of the layers into stages on whole nodes (brute force;
// tests, up to ~8 layers and 3 nodes of 2 GPUs): the least T1 + T2 + T3 at
// N_b = 4 S.
PipelineTemplate BruteForceTemplate(const LayerCosts& times, int nodes, int gpus_per_node);

}  // namespace loom::oobleck
