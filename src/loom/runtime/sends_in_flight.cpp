#include "loom/runtime/sends_in_flight.h"

#include <fmt/format.h>

#include "loom/error.h"

namespace loom::runtime {

int SendsInFlight::IndexOf(int rank, const ActionId& id) {
  auto it = index_.find(rank);
  if (it == index_.end()) {
    std::map<ActionId, int>& ids = index_[rank];
    const std::vector<Action>& actions = schedule_.ranks.at(static_cast<size_t>(rank));
    for (int i = 0; i < static_cast<int>(actions.size()); ++i) {
      const Action& a = actions[static_cast<size_t>(i)];
      if (a.kind != ActionKind::kSend && a.kind != ActionKind::kRecv) continue;
      ids.emplace(ActionId{static_cast<int>(a.kind), a.stage, a.microbatch, a.peer, static_cast<int>(a.payload),
                           a.peer_stage, a.peer_microbatch},
                  i);
    }
    it = index_.find(rank);
  }
  auto found = it->second.find(id);
  return found == it->second.end() ? -1 : found->second;
}

void SendsInFlight::Send(GroupBase& group, int r, const Action& a, int process, torch::Tensor buffer, int tag) {
  const int receive = IndexOf(a.peer, ActionId{static_cast<int>(ActionKind::kRecv), a.stage, a.microbatch, r,
                                               static_cast<int>(a.payload), a.peer_stage, a.peer_microbatch});
  std::vector<InFlight>& sends = in_flight_[process];
  sends.push_back({WorkHandle(), {std::move(buffer)}, a.peer, receive});
  sends.back().work = SendAsync(group, sends.back().buffer, process, tag);
}

void SendsInFlight::Received(int r, const Action& a, int process, AbortFlag abort) {
  auto it = in_flight_.find(process);
  if (it == in_flight_.end()) return;
  const int sent_at = IndexOf(a.peer, ActionId{static_cast<int>(ActionKind::kSend), a.stage, a.microbatch, r,
                                               static_cast<int>(a.payload), a.peer_stage, a.peer_microbatch});
  if (sent_at < 0) return;
  std::vector<InFlight>& sends = it->second;
  std::vector<InFlight> kept;
  for (InFlight& s : sends) {
    if (s.peer_rank == a.peer && s.receive_index >= 0 && s.receive_index < sent_at) {
      AwaitMessage(s.work, abort);  // received already: returns at once
    } else {
      kept.push_back(std::move(s));
    }
  }
  sends = std::move(kept);
}

void SendsInFlight::WaitAll(AbortFlag abort) {
  for (auto& [process, sends] : in_flight_) {
    for (InFlight& s : sends) AwaitMessage(s.work, abort);
  }
  in_flight_.clear();
}

}  // namespace loom::runtime
