// Which processes exchange which tensors between two stages' GPU groups, for
// one step's batch: the messages' keys and tags, the schedule's stage edges
// indexed, what each (stage, microbatch) holds on each part of its group, and
// one routing rule that sends, receives and the backward's gradient lookup
// all use (so the two directions cannot disagree).
// Only runtime translation units include this header (it includes libtorch).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "loom/data/sample.h"
#include "loom/pipeline/schedule.h"
#include "loom/plan/execution_plan.h"
#include "loom/runtime/packing.h"
#include "loom/runtime/process_layout.h"
#include "loom/spec/model.h"

namespace loom::runtime {

// A message between stages: producer stage `from`'s microbatch `mb` on its
// way to consumer stage `to`'s microbatch `consumer` (activations forward,
// their gradients back), from the sender's `part` of its GPU group (its CP rank
// or sequence share; 0 for most stages).
struct MessageKey {
  int from = 0, to = 0, mb = 0, consumer = 0, part = 0;
  auto operator<=>(const MessageKey&) const = default;
};

// Gloo pairs messages by (peer, tag): one tag per (payload, message). Throws
// loom::Error when the schedule needs more tags than Gloo's 31 bits.
int Tag(Payload payload, const MessageKey& m, int stages, int microbatches, int parts);

// One step's stage edges, indexed by their ends. Not copyable: it points into itself.
struct StepEdges {
  explicit StepEdges(const Schedule& sch);
  StepEdges(const StepEdges&) = delete;
  StepEdges& operator=(const StepEdges&) = delete;

  // The consumer microbatch that producer `from`'s microbatch `mb` sends to
  // `to` (`peer_mb` >= 0: the action names it).
  int ConsumerOf(int from, int to, int mb, int peer_mb) const;

  std::vector<StageEdge> edges;
  std::map<std::pair<int, int>, const StageEdge*> of;  // (from, to) -> edge
  std::vector<std::vector<const StageEdge*>> in, out;  // per stage
};

// Rows of a module's packed tensor: (offset, rows) runs, ascending, merged.
using RowRuns = std::vector<std::pair<int64_t, int64_t>>;

// What a message from a producer's part to one part of a consumer stage
// carries: the sequences of the samples that part of the consumer stage holds
// (in any of its microbatches: a consumer microbatch may read a message another
// one of the same edge received, mailbox.h Assemble), in the producer's packing
// order. A broker edge between units of different data-parallel degrees so
// carries only the consuming replica's samples, StageEdge::share of the output
// as the simulator prices it (MMScale's scatter: each sample crosses once);
// elsewhere the consumer holds every sample and the message is the whole output.
struct Carried {
  bool whole = true;                           // every sequence: the producer's output as it is
  const MicrobatchPacking* packing = nullptr;  // the carried sequences (their Part offsets are the producer's)
  std::vector<RowRuns> rows;                   // per module: the producer's rows they are (empty when whole)
  MicrobatchPacking kept;                      // what `packing` points at unless whole
};

// What each (stage, microbatch) holds on each part of its group for one
// step's batch: every piece, or its sequence share's contiguous run of them;
// packed (runtime/packing.h) when first asked. References stay valid for the
// object's life.
class StepPackings {
 public:
  StepPackings(const Model& model, const Batch& batch, const ExecutionPlan& exec, const ProcessPlace& place)
      : model_(model), batch_(batch), exec_(exec), place_(place) {}

  PieceList PiecesOf(int v, int k, int part) const;
  const MicrobatchPacking& At(int v, int k, int part);
  // This process's part.
  const MicrobatchPacking& Mine(int v, int k) { return At(v, k, place_.MyPart(v)); }
  // Whether part `pu` of producer (u, j) and part `pw` of consumer (w, c)
  // exchange a message: the parts pair one to one, or by shared samples where
  // a stage shares sequences.
  bool Paired(int u, int j, int pu, int w, int c, int pw) const;
  // What producer (u, j)'s part pu sends consumer stage w's part pw (Carried),
  // the same on both ends: the sender cuts it, the receiver sizes and reads it.
  const Carried& Carries(int u, int j, int pu, int w, int pw);

 private:
  std::set<int> SamplesOf(int v, int k, int part) const;
  // The samples of every microbatch of stage v on part `part`.
  const std::set<int>& StageSamples(int v, int part);

  const Model& model_;
  const Batch& batch_;
  const ExecutionPlan& exec_;
  const ProcessPlace& place_;
  std::map<std::tuple<int, int, int>, MicrobatchPacking> packed_;   // (stage, mb, part)
  std::map<std::pair<int, int>, std::set<int>> stage_samples_;      // (stage, part)
  std::map<std::tuple<int, int, int, int, int>, Carried> carried_;  // (u, j, pu, w, pw)
};

// One message's route: producer u's microbatch j to consumer w's microbatch
// c, activations (forward) or their gradient (back).
struct Transfer {
  int producer = 0, consumer = 0;
  int mb = 0, consumer_mb = 0;
  bool activation = true;
  int Sender() const { return activation ? producer : consumer; }
  int Receiver() const { return activation ? consumer : producer; }
};

// A process of the other stage's group this process exchanges a transfer with.
struct Partner {
  int shard = 0;          // its index in its GPU group
  MessageKey key;         // the message (its part: the sender's)
  int producer_part = 0;  // the part of the producer's group the tensors belong to
  int consumer_part = 0;  // the part of the consumer's group that reads them (StepPackings::Carries)
};

// The processes of the other side's group that this process (as the sender
// when `sends`, else as the receiver) exchanges `t` with, ascending: the
// receiver's TP shard reads the sender shard it maps to (its TP rank modulo
// the sender's TP), and the producer's and consumer's parts are paired.
std::vector<Partner> Partners(const Transfer& t, bool sends, const ProcessPlace& place, const StepPackings& packings);

}  // namespace loom::runtime
