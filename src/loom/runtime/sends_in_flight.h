// A worker's point-to-point sends in flight, and the earliest moment each
// one's buffer may go. A send completes only once its receiver has received it
// (Gloo rendezvous; NCCL in stream order), and c10d offers nothing to poll, so
// a buffer kept to the step's end would hold every microbatch's boundary
// tensor at once: 2.5 MiB, 5% of a demo stage's peak, that the simulator does
// not price (Megatron frees them as they go). The schedule says when it is
// safe sooner: every receive is blocking, and each process runs its
// schedule rank's actions in order, so once this process has received a
// message that rank `x` sent at action index i, rank `x` has finished every
// receive before i, including those of this process's sends to it. Those are
// waited on (which returns at once) and dropped.
// Only runtime translation units include this header (it includes libtorch).
#pragma once

#include <torch/torch.h>

#include <map>
#include <tuple>
#include <vector>

#include "loom/pipeline/schedule.h"
#include "loom/runtime/c10d_calls.h"

namespace loom::runtime {

class SendsInFlight {
 public:
  explicit SendsInFlight(const Schedule& schedule) : schedule_(schedule) {}

  // Sends `buffer` as schedule rank r's send action `a` to `process` (which
  // runs rank a.peer). The buffer lives until Received or WaitAll drops it.
  void Send(GroupBase& group, int r, const Action& a, int process, torch::Tensor buffer, int tag);
  // Rank r's receive action `a` from `process` has completed: drops the sends
  // to `process` that rank a.peer received before it sent this message.
  void Received(int r, const Action& a, int process, AbortFlag abort);
  // Waits for every send still in flight (the step's end).
  void WaitAll(AbortFlag abort);

 private:
  // (kind, sending stage, microbatch, peer, payload, peer stage, peer microbatch)
  using ActionId = std::tuple<int, int, int, int, int, int, int>;
  // The index of rank `rank`'s action `id` in its list; -1 if it has none.
  int IndexOf(int rank, const ActionId& id);

  struct InFlight {
    WorkHandle work;
    std::vector<at::Tensor> buffer;
    int peer_rank;      // the schedule rank that receives it
    int receive_index;  // the index of that receive in its rank's actions
  };
  const Schedule& schedule_;
  std::map<int, std::map<ActionId, int>> index_;    // rank -> its send/receive actions' indices, built on first use
  std::map<int, std::vector<InFlight>> in_flight_;  // destination process -> its sends, in issue order
};

}  // namespace loom::runtime
