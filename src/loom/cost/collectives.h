// Collective and point-to-point times as pure alpha-beta functions of the
// message size, group size and link (latency alpha, per-direction bandwidth
// beta). `bytes` is always the full buffer: what each rank holds before an
// all-reduce, or the gathered result of an all-gather / the input of a
// reduce-scatter. Closed forms in docs/cost-model.md; tests check them.
#pragma once

#include "loom/spec/cluster.h"

namespace loom {

double P2PTime_s(double bytes, const Link& link);
// Ring: 2(n-1) steps of bytes/n each.
double RingAllReduceTime_s(double bytes, int n, const Link& link);
// Pipelined binary tree (reduce then broadcast): 2 ceil(log2 n) latencies, 2 bytes/beta.
double TreeAllReduceTime_s(double bytes, int n, const Link& link);
double AllGatherTime_s(double bytes, int n, const Link& link);
double ReduceScatterTime_s(double bytes, int n, const Link& link);
// Two-level all-reduce over `nodes` nodes of `per_node` ranks: reduce-scatter
// inside the node, all-reduce of bytes/per_node across nodes (ring), all-gather
// inside the node.
double HierarchicalAllReduceTime_s(double bytes, int per_node, int nodes, const Link& intra, const Link& inter);

// All-reduce of a group of `n` ranks placed `stride` apart on the cluster
// (tp groups: stride 1; dp groups: stride tp x pp ...): ring inside one
// node, hierarchical when the group spans nodes. The cheaper of ring and tree
// is taken across nodes, as NCCL's tuner does.
double GroupAllReduceTime_s(double bytes, int n, int stride, const Cluster& cluster);
double GroupAllGatherTime_s(double bytes, int n, int stride, const Cluster& cluster);

}  // namespace loom
