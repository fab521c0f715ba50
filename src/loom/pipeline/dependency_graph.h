// The dependency graph of a Schedule: every action flattened to an id, its
// predecessor on its stream, and the actions whose results it needs (a
// forward needs the previous stage's forward or the receive of it, a receive
// needs the matching send, a collective needs the stage's last backward, ...).
// The validator checks it is acyclic; the simulator walks it. Built once per
// schedule; read-only afterwards.
#pragma once

#include <vector>

#include "loom/pipeline/schedule.h"

namespace loom {

struct DependencyGraph {
  std::vector<int> offset;       // flat id of rank r's first action; size ranks + 1
  std::vector<int> rank;         // rank of each flat id
  std::vector<int> stream_prev;  // previous action on the same stream and rank, or -1
  std::vector<int> dep_begin;    // deps of id i are dep_id[dep_begin[i] .. dep_begin[i+1])
  std::vector<int> dep_id;
  // 1: the dependency is satisfied when the producer ends; f < 1: once a
  // fraction f of it has run (a gradient bucket ready during the last backward).
  std::vector<double> dep_fraction;
  std::vector<int> last_backward;  // per stage: id of its last backward (or weight) pass, -1 if none

  int size() const { return static_cast<int>(rank.size()); }
  int id(int r, int index) const { return offset[r] + index; }
};

// The users of every action (its stream successor and the actions depending
// on it), and an order of the actions that respects every edge: Kahn's
// algorithm, first in first out (deterministic). `order` misses the actions
// on or behind a cycle; ValidateSchedule reports them.
struct ActionOrder {
  std::vector<int> order;
  std::vector<int> users_begin;  // users of id i are users[users_begin[i] .. users_begin[i+1])
  std::vector<int> users;
  bool complete(const DependencyGraph& g) const { return static_cast<int>(order.size()) == g.size(); }
};
ActionOrder TopologicalOrder(const DependencyGraph& g);

// Throws loom::Error naming the rank, the action and the missing producer when
// an action has nothing to wait for (a receive without a send, a backward
// without its forward). `grad_buckets` > 0 with `overlap` lets bucket b of a
// stage start after (b + 1) / buckets of its last backward. `sync_stream`:
// a rank's gradient collectives run in list order on a stream of their own;
// false: behind its sends on the communication stream (before issue 44).
DependencyGraph BuildDependencies(const Schedule& s, bool overlap_grad_sync = true, bool sync_stream = true);

}  // namespace loom
