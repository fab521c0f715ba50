// A Schedule is the ordered list of actions each pipeline rank runs in one
// iteration, in one vocabulary shared by every schedule and strategy:
// forward, backward (fused), backward-data, backward-weight, send, recv,
// collective, wait. Compute actions and receives run in list order on the
// rank's compute stream (a receive blocks it until the data lands); sends run
// in list order on its communication stream and gradient collectives on a
// data-parallel stream of their own (SimOptions::sync_stream), overlapping
// compute. Virtual stage v lives on rank stage_rank[v] (interleaving puts
// several on one rank, co-located units of a plan put stages of several modules
// on one rank). Stages form a DAG (`edges`; empty means the chain v-1 -> v) and
// each stage has its own microbatch count (`stage_microbatches`; empty means
// num_microbatches each), so one schedule can join encoder sub-microbatches to
// backbone microbatches or several DP pipelines of different depths. Immutable
// once built; safe to share read-only.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
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
  kCollective = 6,     // data-parallel gradient sync of one bucket of a stage
  kWait = 7,           // compute stream waits for this rank's collectives
  kOptimizerStep = 8,  // the optimizer updates this rank's weights (after the wait)
};

enum class Payload : uint8_t { kActivation = 0, kGradient = 1 };

// Forward, fused backward, or one of its halves: what runs on the compute stream.
inline bool IsCompute(ActionKind kind) {
  return kind == ActionKind::kForward || kind == ActionKind::kBackward || kind == ActionKind::kBackwardData ||
         kind == ActionKind::kBackwardWeight;
}

struct Action {
  ActionKind kind = ActionKind::kForward;
  int stage = -1;  // virtual stage it computes, or the sending stage for send/recv
  int microbatch = -1;
  int peer = -1;  // send: destination rank; recv: source rank
  Payload payload = Payload::kActivation;
  int bucket = -1;  // collective: gradient bucket of `stage`
  // send/recv: the receiving end's stage. An activation goes from `stage` (its
  // producer) to `peer_stage`; a gradient goes from `stage` (the consumer that
  // computed it) back to `peer_stage` (the producer of the output it is the
  // gradient of), and `microbatch` is the producer's microbatch. -1: the chain
  // neighbour (stage + 1 for activations, stage - 1 for gradients).
  int peer_stage = -1;
  // collective: the communication group it runs over (an index into the
  // ExecutionPlan's groups); -1: the data-parallel replicas of its stage.
  int group = -1;
  // send/recv on a many-to-many edge (StageEdge::producers): the consumer's
  // microbatch of this (producer, consumer) pair; -1 on other edges, where a
  // producer microbatch has one consumer.
  int peer_microbatch = -1;

  bool is_compute() const { return IsCompute(kind); }
  bool on_comm_stream() const { return kind == ActionKind::kSend || kind == ActionKind::kCollective; }
  bool operator==(const Action& o) const = default;
};

// Stage `to` consumes the output of stage `from`. Three forms:
//   - one to one (`first` and `producers` empty): microbatch k needs microbatch k;
//   - ranges: consumer microbatch k needs producer microbatches
//     [first[k], first[k+1]) (sub-microbatches regrouped; MMScale's brokers);
//   - many to many: consumer microbatch k needs exactly producers[k], and a
//     producer microbatch may feed several consumers (Entrain moves samples of
//     encoder microbatch i into backbone microbatch j); its gradient then comes
//     from every consumer it fed.
// INVARIANTS: at most one of first / producers; first is non-decreasing, starts
// at 0 and ends at the producer's count; producers has one sorted, duplicate-free
// list per consumer microbatch, and every producer microbatch is in some list.
// `share` is the part of each producer microbatch's output (and of its
// gradient) that the edge carries: below 1 on a broker edge that scatters a
// producing replica's samples over several consuming replicas (MMScale §6:
// each replica's output crosses the unit boundary once, in gcd(DP_up, DP_down)
// independent groups), 1 elsewhere. INVARIANT: 0 < share <= 1.
struct StageEdge {
  int from = 0;
  int to = 0;
  std::vector<int> first;
  std::vector<std::vector<int>> producers;
  double share = 1.0;
  bool operator==(const StageEdge&) const = default;
};

// Action `index` of `rank` starts only after action `after_index` of
// `after_rank` ends: a barrier between units that take turns on the same GPUs
// (temporal phases, plan/plan.h).
struct ExtraDep {
  int rank = 0;
  int index = 0;
  int after_rank = 0;
  int after_index = 0;
  bool operator==(const ExtraDep&) const = default;
};

struct Schedule {
  std::string name;
  int num_ranks = 0;
  int num_microbatches = 0;
  std::vector<int> stage_rank;  // virtual stage -> rank
  std::vector<std::vector<Action>> ranks;
  std::vector<int> stage_microbatches;  // per stage; empty: num_microbatches each
  std::vector<StageEdge> edges;         // empty and !dag: the chain 0 -> 1 -> ... -> stages-1
  bool dag = false;                     // true: `edges` is the whole stage graph, even when empty
  // Per stage, the stages of other pipelines holding the same layers: their
  // gradient sync starts only when all of them finished their backward
  // (Oobleck's layer-wise sync across heterogeneous pipelines). Empty: none.
  std::vector<std::vector<int>> sync_with;
  std::vector<ExtraDep> extra_deps;
  // Per stage, -1 or an id: stages of different pipelines with one id hold
  // exactly the same layers, cut alike, so each gradient bucket of theirs is
  // one all-reduce, started when every one of them has that bucket ready (a
  // replicated plan's copies of a stage behave so implicitly). Empty: none.
  std::vector<int> sync_set;

  int num_stages() const { return static_cast<int>(stage_rank.size()); }
  int num_actions() const;
  int microbatches_of(int stage) const {
    return stage_microbatches.empty() ? num_microbatches : stage_microbatches[stage];
  }
  bool operator==(const Schedule&) const = default;
  // `edges`, or the default chain when it is empty.
  std::vector<StageEdge> StageEdges() const;
};

// Producer microbatches [lo, hi) that consumer microbatch k of edge e needs.
// REQUIRES: e is not many to many.
std::pair<int, int> ProducerRange(const StageEdge& e, int k);
// The consumer microbatch that producer microbatch j of edge e feeds.
// REQUIRES: e is not many to many.
int ConsumerOf(const StageEdge& e, int j);
// Every form: the producer microbatches consumer k needs, and the consumer
// microbatches producer j feeds (of `consumers` in all), ascending.
std::vector<int> Producers(const StageEdge& e, int k);
std::vector<int> Consumers(const StageEdge& e, int j, int consumers);

// "F3@2" (forward of microbatch 3 on stage 2), "B", "Bd", "W", "send-act", ...
std::string ActionName(const Action& a);
// One line per rank of compute actions: "rank0: F0 F1 B0 ..." (golden tests).
std::string ComputeOrder(const Schedule& s);

// Inserts the point-to-point traffic a compute order implies, over the stage
// DAG: a receive before each compute action for every input that lives on
// another rank, a send after each compute action for every consumer (forward)
// or producer (backward) on another rank.
void AddPointToPoint(Schedule& s);
// Appends, per rank and per stage it holds, `buckets` gradient collectives on
// the communication stream and one final wait on the compute stream.
void AddGradientSync(Schedule& s, int buckets);
// Appends one optimizer step per rank on its compute stream (after its wait).
void AddOptimizerStep(Schedule& s);

}  // namespace loom
