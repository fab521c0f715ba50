#include "loom/cost/collectives.h"

#include <algorithm>
#include <cmath>

namespace loom {

double P2PTime_s(double bytes, const Link& link) { return link.latency_s + bytes / link.bytes_per_s; }

double RingAllReduceTime_s(double bytes, int n, const Link& link) {
  if (n <= 1) {
    return 0;
  }
  double steps = 2.0 * (n - 1);
  return steps * link.latency_s + steps / n * bytes / link.bytes_per_s;
}

double TreeAllReduceTime_s(double bytes, int n, const Link& link) {
  if (n <= 1) {
    return 0;
  }
  double depth = std::ceil(std::log2(static_cast<double>(n)));
  return 2 * depth * link.latency_s + 2 * bytes / link.bytes_per_s;
}

double AllGatherTime_s(double bytes, int n, const Link& link) {
  if (n <= 1) {
    return 0;
  }
  double steps = n - 1.0;
  return steps * link.latency_s + steps / n * bytes / link.bytes_per_s;
}

double ReduceScatterTime_s(double bytes, int n, const Link& link) { return AllGatherTime_s(bytes, n, link); }

double HierarchicalAllReduceTime_s(double bytes, int per_node, int nodes, const Link& intra, const Link& inter) {
  return ReduceScatterTime_s(bytes, per_node, intra) + RingAllReduceTime_s(bytes / per_node, nodes, inter) +
         AllGatherTime_s(bytes, per_node, intra);
}

namespace {

// How a group of n ranks, `stride` apart, lays out: ranks per node and nodes.
void Layout(int n, int stride, const Cluster& c, int* per_node, int* nodes, int* span) {
  *span = (n - 1) * stride + 1;
  *per_node = std::clamp(c.gpus_per_node / std::max(stride, 1), 1, n);
  if (stride > c.gpus_per_node) {
    *per_node = 1;
  }
  *nodes = (n + *per_node - 1) / *per_node;
}

}  // namespace

double GroupAllReduceTime_s(double bytes, int n, int stride, const Cluster& c) {
  if (n <= 1) {
    return 0;
  }
  int per_node, nodes, span;
  Layout(n, stride, c, &per_node, &nodes, &span);
  if (nodes == 1) {
    // A measured collective step (the profile's) where there is one.
    return RingAllReduceTime_s(bytes, n, c.collective.bytes_per_s > 0 ? c.collective : c.LinkForSpan(span));
  }
  Link intra = c.LinkForSpan(std::min(span, c.gpus_per_node));
  if (per_node == 1) {
    return std::min(RingAllReduceTime_s(bytes, n, c.network), TreeAllReduceTime_s(bytes, n, c.network));
  }
  double ring_inter = HierarchicalAllReduceTime_s(bytes, per_node, nodes, intra, c.network);
  double tree_inter = ReduceScatterTime_s(bytes, per_node, intra) +
                      TreeAllReduceTime_s(bytes / per_node, nodes, c.network) + AllGatherTime_s(bytes, per_node, intra);
  return std::min(ring_inter, tree_inter);
}

double GroupAllGatherTime_s(double bytes, int n, int stride, const Cluster& c) {
  if (n <= 1) {
    return 0;
  }
  int per_node, nodes, span;
  Layout(n, stride, c, &per_node, &nodes, &span);
  // A ring is as slow as its slowest hop.
  if (nodes == 1 && c.collective.bytes_per_s > 0) return AllGatherTime_s(bytes, n, c.collective);
  return AllGatherTime_s(bytes, n, nodes == 1 ? c.LinkForSpan(span) : c.network);
}

}  // namespace loom
