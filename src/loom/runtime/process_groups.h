// The communication groups of one worker process: the world, its GPU group's
// tensor-parallel and context-parallel groups, and the data-parallel group
// of each communication group it belongs to. Every member creates a plan's
// groups in the same order (a rendezvous waits for all its members), so
// making them cannot deadlock.
// Only runtime translation units include this header (it includes libtorch).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "loom/plan/execution_plan.h"
#include "loom/runtime/c10d_calls.h"
#include "loom/runtime/context_parallel.h"
#include "loom/runtime/process_layout.h"
#include "loom/runtime/torch_model.h"

namespace loom::runtime {

// Makes named groups in one store. In a fault-tolerant run (`abort` set) a
// rendezvous waits in the store for every member, and a member may have died:
// it runs on a thread of its own, abandoned if the launcher's command arrives
// first (it ends at the store's timeout, harmlessly), and every group made is
// kept in `keep_alive` (an aborted generation's groups are never destroyed:
// their threads may still wait on a dead peer).
class GroupMaker {
 public:
  GroupMaker(c10::intrusive_ptr<c10d::Store> store, double timeout_s, std::string host, bool cuda,
             AbortFlag abort = nullptr, std::vector<Group>* keep_alive = nullptr)
      : store_(std::move(store)),
        timeout_s_(timeout_s),
        host_(std::move(host)),
        cuda_(cuda),
        abort_(abort),
        keep_alive_(keep_alive) {}

  // This process as member `rank` of `size`.
  Group Make(const std::string& name, int rank, int size) const;

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  double timeout_s_;
  std::string host_;
  bool cuda_;
  AbortFlag abort_;
  std::vector<Group>* keep_alive_;
};

struct ProcessGroups {
  Group world;
  // The GPU group's tensor-parallel groups, one per TP degree its stages use.
  std::map<int, Group> tp;                        // TP degree -> this shard's group
  std::map<int, TensorParallel> tensor_parallel;  // TP degree -> this process's shard (1: none)
  // Its context-parallel ranks (cp_size 1: none).
  Group cp;
  ContextParallel context_parallel;
  // Data-parallel groups, by communication group id: with context
  // parallelism each replica's CP ranks hold the same weights and gradients
  // of different rows and join the group (dp x cp, as in Megatron); so do a
  // stage's sequence shares.
  std::map<int, Group> dp;
  std::map<int, std::pair<int, int>> dp_place;  // group id -> (my index, size)
};

// The world, tensor-parallel (ascending degree) and context-parallel groups:
// what a stage's layers need to be built.
ProcessGroups MakeModelGroups(const GroupMaker& maker, const ExecutionPlan& exec, const ProcessPlace& place, int world);

// The data-parallel groups, in communication group id order on every member.
// `layerwise` (heterogeneous pipeline templates): none, gradients are summed
// per layer segment instead (runtime/optimizer_steps.h).
void AddDataParallelGroups(ProcessGroups& groups, const GroupMaker& maker, const ExecutionPlan& exec,
                           const ProcessPlace& place, bool layerwise);

}  // namespace loom::runtime
