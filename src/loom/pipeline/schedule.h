// A Schedule is the ordered list of actions each pipeline rank runs in one
// iteration, in one vocabulary shared by every schedule and strategy:
// forward, backward (fused), backward-data, backward-weight, send, recv,
// collective, wait. Compute actions and receives run in list order on the
// rank's compute stream (a receive blocks it until the data lands); sends and
// collectives run in list order on its communication stream, overlapping
// compute. Virtual stage v lives on rank stage_rank[v] (interleaving puts
// several on one rank). Immutable once built; safe to share read-only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom {

// Stored in trace files and golden tests: append, never renumber.
enum class ActionKind : uint8_t {
  kForward = 0,
  kBackward = 1,        // backward-data and backward-weight fused (1F1B, GPipe)
  kBackwardData = 2,    // input gradient only (zero-bubble split)
  kBackwardWeight = 3,  // weight gradient only
  kSend = 4,
  kRecv = 5,
  kCollective = 6,      // data-parallel gradient sync of one bucket of a stage
  kWait = 7,            // compute stream waits for this rank's collectives
};

enum class Payload : uint8_t { kActivation = 0, kGradient = 1 };

struct Action {
  ActionKind kind = ActionKind::kForward;
  int stage = -1;       // virtual stage it computes, or the sending stage for send/recv
  int microbatch = -1;
  int peer = -1;        // send: destination rank; recv: source rank
  Payload payload = Payload::kActivation;
  int bucket = -1;      // collective: gradient bucket of `stage`

  bool is_compute() const {
    return kind == ActionKind::kForward || kind == ActionKind::kBackward ||
           kind == ActionKind::kBackwardData || kind == ActionKind::kBackwardWeight;
  }
  bool on_comm_stream() const { return kind == ActionKind::kSend || kind == ActionKind::kCollective; }
  bool operator==(const Action& o) const = default;
};

struct Schedule {
  std::string name;
  int num_ranks = 0;
  int num_microbatches = 0;
  std::vector<int> stage_rank;  // virtual stage -> rank
  std::vector<std::vector<Action>> ranks;

  int num_stages() const { return static_cast<int>(stage_rank.size()); }
  int num_actions() const;
};

// "F3@2" (forward of microbatch 3 on stage 2), "B", "Bd", "W", "send-act", ...
std::string ActionName(const Action& a);
// One line per rank of compute actions: "rank0: F0 F1 B0 ..." (golden tests).
std::string ComputeOrder(const Schedule& s);

// Inserts the point-to-point traffic a compute order implies: a receive before
// each compute action whose input lives on another rank, a send after each
// compute action whose output another rank needs.
void AddPointToPoint(Schedule& s);
// Appends, per rank and per stage it holds, `buckets` gradient collectives on
// the communication stream and one final wait on the compute stream.
void AddGradientSync(Schedule& s, int buckets);

}  // namespace loom
