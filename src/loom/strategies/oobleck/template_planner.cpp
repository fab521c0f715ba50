#include "loom/strategies/oobleck/template_planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "loom/error.h"

namespace loom::oobleck {

double CriticalPath_s(const std::vector<double>& stage_s, int microbatches) {
  const int S = static_cast<int>(stage_s.size());
  if (S == 0) return 0;
  int k_star = 0;
  for (int k = 1; k < S; ++k) {
    if (stage_s[k] > stage_s[k_star]) k_star = k;
  }
  double t1 = 0, t3 = 0;
  for (int k = 0; k < S; ++k) {
    t1 += stage_s[k];
    if (k >= k_star) t3 += stage_s[k];
  }
  return t1 + (microbatches - S + k_star - 1) * stage_s[k_star] + t3;  // Eq. 2.1-2.3 at the top
}

double PipelineTemplate::IterationTime_s(int microbatches) const {
  std::vector<double> t;
  for (const auto& s : stages) t.push_back(s.time_s);
  return CriticalPath_s(t, microbatches);
}

double TemplatePlanner::Part::Cost() const {
  return t1 + (3.0 * stages + k_star - 1) * slow + tail;  // N_b = 4 S
}

TemplatePlanner::Part TemplatePlanner::Combine(const Part& a, const Part& b) {
  Part c;
  c.t1 = a.t1 + b.t1;
  c.stages = a.stages + b.stages;
  if (a.slow >= b.slow) {  // Eq. 2.3: the slowest stage in the first half
    c.slow = a.slow;
    c.k_star = a.k_star;
    c.tail = a.tail + b.t1;
  } else {
    c.slow = b.slow;
    c.k_star = a.stages + b.k_star;
    c.tail = b.tail;
  }
  return c;
}

namespace {
// No partition: too many or too few stages for the GPUs, or too few layers.
const TemplatePlanner::Part kInfeasible{0, 0, -1, 0, 0, -2, 0, 0};
}  // namespace

TemplatePlanner::TemplatePlanner(LayerCosts times, int gpus_per_node, LayerMemory memory)
    : times_(std::move(times)), memory_(std::move(memory)), gpus_per_node_(gpus_per_node), layers_(times_.layers()) {
  if (layers_ < 1 || gpus_per_node_ < 1 || times_.max_gpus() < gpus_per_node_) {
    throw Error("oobleck: layer times need every layer on 1 .. M GPUs of a node");
  }
  prefix_.assign(gpus_per_node_, std::vector<double>(layers_ + 1, 0));
  for (int d = 0; d < gpus_per_node_; ++d) {
    for (int l = 0; l < layers_; ++l) prefix_[d][l + 1] = prefix_[d][l] + times_.time_s[l][d];
  }
  if (!memory_.empty()) {
    state_prefix_.assign(gpus_per_node_, std::vector<double>(layers_ + 1, 0));
    act_prefix_ = state_prefix_;
    for (int d = 0; d < gpus_per_node_; ++d) {
      for (int l = 0; l < layers_; ++l) {
        state_prefix_[d][l + 1] = state_prefix_[d][l] + memory_.state_bytes[l][d];
        act_prefix_[d][l + 1] = act_prefix_[d][l] + memory_.activation_bytes[l][d];
      }
    }
  }
  const int M = gpus_per_node_, L1 = layers_ + 1;
  gpu_memo_.assign(static_cast<size_t>(M + 1) * L1 * L1 * (M + 1), Part{});
}

bool TemplatePlanner::StageFits(int u, int v, int gpus, int in_flight) const {
  if (memory_.empty()) return true;
  const int d = gpus - 1;
  return state_prefix_[d][v] - state_prefix_[d][u] + in_flight * (act_prefix_[d][v] - act_prefix_[d][u]) <=
         memory_.capacity_bytes;
}

bool TemplatePlanner::NodeFits(int stages, int u, int v, int after) {
  if (memory_.empty()) return true;
  // Walk the node's best split: stage i of `stages` has after + stages - i in flight.
  int gpus = gpus_per_node_;
  for (int i = 0; i < stages; ++i) {
    const Part& p = OnGpus(stages - i, u, v, gpus);
    const int end = stages - i == 1 ? v : p.split_layer, width = stages - i == 1 ? gpus : p.split_units;
    if (!StageFits(u, end, width, after + stages - i)) return false;
    u = end;
    gpus -= width;
  }
  return true;
}

const TemplatePlanner::Part& TemplatePlanner::OnGpus(int stages, int u, int v, int gpus) {
  const int M = gpus_per_node_, L1 = layers_ + 1;
  if (stages < 1 || stages > gpus || v - u < stages) return kInfeasible;
  Part& out = gpu_memo_[((static_cast<size_t>(stages) * L1 + u) * L1 + v) * (M + 1) + gpus];
  if (out.stages > 0 || out.split == -2) return out;
  ++computed_;
  if (stages == 1) {  // Eq. 2.4: one stage on `gpus` GPUs of the node
    const double t = prefix_[gpus - 1][v] - prefix_[gpus - 1][u];
    // Infinite: no such stage; one that cannot hold a single microbatch neither.
    out = std::isfinite(t) && StageFits(u, v, gpus, 1) ? Part{t, t, t, 0, 1, -1, 0, 0} : kInfeasible;
    return out;
  }
  Part best;
  best.split = -2;  // infeasible until a divide works
  double best_cost = std::numeric_limits<double>::infinity();
  // The first stage takes layers [u, k) on m GPUs; the rest on what is left.
  for (int k = u + 1; k <= v - (stages - 1); ++k) {
    for (int m = 1; m <= gpus - (stages - 1); ++m) {
      const Part& first = OnGpus(1, u, k, m);
      if (first.stages == 0) continue;
      const Part& rest = OnGpus(stages - 1, k, v, gpus - m);
      if (rest.stages == 0) continue;
      Part c = Combine(first, rest);
      const double cost = c.Cost();
      if (cost < best_cost) {
        best_cost = cost;
        c.split = 1;
        c.split_layer = k;
        c.split_units = m;
        best = c;
      }
    }
  }
  out = best;
  return out;
}

const TemplatePlanner::Part& TemplatePlanner::OnNodes(int stages, int u, int nodes) {
  const int M = gpus_per_node_, L1 = layers_ + 1;
  if (stages < nodes || stages > nodes * M || layers_ - u < stages) return kInfeasible;
  if (nodes == 1) return OnGpus(stages, u, layers_, M);
  const size_t idx = (static_cast<size_t>(stages) * L1 + u) * (memo_nodes_ + 1) + nodes;
  Part& out = node_memo_[idx];
  if (out.stages > 0 || out.split == -2) return out;
  ++computed_;
  Part best;
  best.split = -2;
  double best_cost = std::numeric_limits<double>::infinity();
  // The first node takes s stages over layers [u, k); every node has at
  // least one stage and every stage one layer.
  for (int s = 1; s <= std::min(M, stages - (nodes - 1)); ++s) {
    for (int k = u + s; k <= layers_ - (stages - s); ++k) {
      const Part& first = OnGpus(s, u, k, M);
      if (first.stages == 0 || !NodeFits(s, u, k, stages - s)) continue;
      const Part& rest = OnNodes(stages - s, k, nodes - 1);
      if (rest.stages == 0) continue;
      Part c = Combine(first, rest);
      const double cost = c.Cost();
      if (cost < best_cost) {
        best_cost = cost;
        c.split = s;
        c.split_layer = k;
        c.split_units = 1;
        best = c;
      }
    }
  }
  out = best;  // the tables are sized up front in Plan: `out` is still valid
  return out;
}

void TemplatePlanner::EmitGpus(int stages, int u, int v, int gpus, int node, std::vector<TemplateStage>* out) {
  const Part& p = OnGpus(stages, u, v, gpus);
  if (stages == 1) {
    out->push_back({u, v, node, gpus, p.t1});
    return;
  }
  EmitGpus(1, u, p.split_layer, p.split_units, node, out);
  EmitGpus(stages - 1, p.split_layer, v, gpus - p.split_units, node, out);
}

void TemplatePlanner::EmitNodes(int stages, int u, int nodes, int node, std::vector<TemplateStage>* out) {
  if (nodes == 1) {
    EmitGpus(stages, u, layers_, gpus_per_node_, node, out);
    return;
  }
  const Part& p = OnNodes(stages, u, nodes);
  EmitGpus(p.split, u, p.split_layer, gpus_per_node_, node, out);
  EmitNodes(stages - p.split, p.split_layer, nodes - 1, node + 1, out);
}

PipelineTemplate TemplatePlanner::Plan(int nodes) {
  if (nodes < 1 || nodes > layers_) {
    throw Error(fmt::format("oobleck: a template of {} nodes needs at least one layer per node; the model has {}",
                            nodes, layers_));
  }
  const int M = gpus_per_node_, L1 = layers_ + 1;
  if (nodes > memo_nodes_) {  // grow the node table, keeping what is solved
    std::vector<Part> grown(static_cast<size_t>(layers_ + 1) * L1 * (nodes + 1), Part{});
    for (int s = 0; s <= layers_ && !node_memo_.empty(); ++s) {
      for (int u = 0; u < L1; ++u) {
        for (int a = 0; a <= memo_nodes_; ++a) {
          grown[(static_cast<size_t>(s) * L1 + u) * (nodes + 1) + a] =
              node_memo_[(static_cast<size_t>(s) * L1 + u) * (memo_nodes_ + 1) + a];
        }
      }
    }
    node_memo_ = std::move(grown);
    memo_nodes_ = nodes;
  }
  PipelineTemplate best;
  best.nodes = nodes;
  double best_cost = std::numeric_limits<double>::infinity();
  int best_s = 0;
  // S in [n, min(L, n M)]: at least a stage per node, at most a GPU per stage.
  for (int S = nodes; S <= std::min(layers_, nodes * M); ++S) {
    const Part& p = OnNodes(S, 0, nodes);
    if (p.stages == 0 || (nodes == 1 && !NodeFits(S, 0, layers_, 0))) continue;
    const double cost = p.Cost();
    if (cost < best_cost) {
      best_cost = cost;
      best_s = S;
    }
  }
  if (best_s == 0) {
    throw Error(
        fmt::format("oobleck: no template of {} nodes: no split of the {} layers into stages of one node "
                    "each fits{}",
                    nodes, layers_, memory_.empty() ? "" : " in memory"));
  }
  EmitNodes(best_s, 0, nodes, 0, &best.stages);
  best.planned_s = best_cost;
  return best;
}

PipelineTemplate BruteForceTemplate(const LayerCosts& times, int nodes, int gpus_per_node) {
  const int L = times.layers(), M = gpus_per_node;
  PipelineTemplate best;
  best.nodes = nodes;
  best.planned_s = std::numeric_limits<double>::infinity();
  std::vector<TemplateStage> cur;
  // Compositions of M into GPU counts per stage, layers split in order.
  std::function<void(int, int, int)> rec = [&](int node, int u, int gpus_left) {
    if (node == nodes) {
      if (u != L) return;
      std::vector<double> t;
      for (const auto& s : cur) t.push_back(s.time_s);
      const double c = CriticalPath_s(t, 4 * static_cast<int>(t.size()));
      if (c < best.planned_s) {
        best.planned_s = c;
        best.stages = cur;
      }
      return;
    }
    for (int d = 1; d <= gpus_left; ++d) {
      for (int v = u + 1; v <= L; ++v) {
        double t = 0;
        for (int l = u; l < v; ++l) t += times.time_s[l][d - 1];
        cur.push_back({u, v, node, d, t});
        if (d == gpus_left) {
          rec(node + 1, v, M);  // the node is full: on to the next one
        } else {
          rec(node, v, gpus_left - d);
        }
        cur.pop_back();
      }
    }
  };
  rec(0, 0, M);
  return best;
}

}  // namespace loom::oobleck
