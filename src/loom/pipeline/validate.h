// Schedule validation: every (stage, microbatch) has exactly one forward and
// one backward (fused, or data + weight) on its stage's rank, each forward
// precedes its backward on that rank, every send is matched by one receive on
// its peer and the reverse, and the actions can all run (no cyclic wait).
#pragma once

#include "loom/pipeline/dependency_graph.h"
#include "loom/pipeline/schedule.h"

namespace loom {

// Throws loom::Error naming the rank and the action of the first violation;
// for a deadlock, the blocked action and what it waits for.
void ValidateSchedule(const Schedule& s);
// The same with the schedule's dependency graph already built
// (BuildDependencies(s, any overlap): the edges do not depend on it), as the
// simulator has it; returns the order it proved the schedule runs in (what
// the simulator walks). REQUIRES: s.ranks.size() == s.num_ranks.
ActionOrder ValidateSchedule(const Schedule& s, const DependencyGraph& g);

// NCCL pairs point-to-point messages between two ranks by order, not by tag
// (Gloo matches tags): the k-th send from rank A to rank B meets the k-th
// receive on B from A. Returns the first pair of ranks whose send and receive
// orders differ, naming both messages, or "" when every pair agrees.
std::string MessageOrderMismatch(const Schedule& s);

}  // namespace loom
