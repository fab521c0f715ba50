#include "loom/runtime/message_routing.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <span>

#include "loom/error.h"
#include "loom/plan/compile_plan.h"

namespace loom::runtime {

int Tag(Payload payload, const MessageKey& m, int stages, int microbatches, int parts) {
  const int64_t tag =
      (((((static_cast<int64_t>(payload) * stages + m.from) * stages + m.to) * microbatches + m.mb) * microbatches) +
       m.consumer) *
          parts +
      m.part;
  if (tag > 0x7fffffff) {
    throw Error(
        fmt::format("runtime: {} stages of up to {} microbatches ({} parts of a group) need more message "
                    "tags than Gloo has",
                    stages, microbatches, parts));
  }
  return static_cast<int>(tag);
}

StepEdges::StepEdges(const Schedule& sch) : edges(sch.StageEdges()), in(sch.num_stages()), out(sch.num_stages()) {
  for (const auto& e : edges) {
    of[{e.from, e.to}] = &e;
    in[e.to].push_back(&e);
    out[e.from].push_back(&e);
  }
}

int StepEdges::ConsumerOf(int from, int to, int mb, int peer_mb) const {
  if (peer_mb >= 0) return peer_mb;
  const StageEdge& e = *of.at({from, to});
  return e.first.empty() ? mb : loom::ConsumerOf(e, mb);
}

PieceList StepPackings::PiecesOf(int v, int k, int part) const {
  const auto& all = exec_.replicas[place_.content][v][k].pieces;
  if (!place_.Shares(v)) return all;
  const int n = exec_.stages[v].seq_share;
  const auto cut = SplitEven(std::vector<int>(all.size()), n);
  size_t begin = 0;
  for (int i = 0; i < part; ++i) begin += cut[i].size();
  if (cut[part].empty()) {
    throw Error(
        fmt::format("runtime: stage {} ({}) microbatch {} has {} sample piece(s) for {} GPUs sharing "
                    "its sequences",
                    v, exec_.stages[v].label, k, all.size(), n));
  }
  return PieceList(std::span<const SamplePiece>(all.begin() + begin, cut[part].size()));
}

const MicrobatchPacking& StepPackings::At(int v, int k, int part) {
  auto it = packed_.find({v, k, part});
  if (it == packed_.end()) {
    it = packed_.emplace(std::make_tuple(v, k, part), PackMicrobatch(model_, batch_, PiecesOf(v, k, part))).first;
  }
  return it->second;
}

std::set<int> StepPackings::SamplesOf(int v, int k, int part) const {
  std::set<int> out;
  for (const auto& piece : PiecesOf(v, k, part)) out.insert(piece.sample);
  return out;
}

bool StepPackings::Paired(int u, int j, int pu, int w, int c, int pw) const {
  if (!place_.Shares(u) && !place_.Shares(w)) return pu == pw;
  const auto a = SamplesOf(u, j, pu), b = SamplesOf(w, c, pw);
  return std::any_of(a.begin(), a.end(), [&](int x) { return b.count(x) > 0; });
}

const std::set<int>& StepPackings::StageSamples(int v, int part) {
  auto it = stage_samples_.find({v, part});
  if (it == stage_samples_.end()) {
    std::set<int> all;
    const int microbatches = static_cast<int>(exec_.replicas[place_.content][v].size());
    for (int k = 0; k < microbatches; ++k) {
      for (const auto& piece : PiecesOf(v, k, part)) all.insert(piece.sample);
    }
    it = stage_samples_.emplace(std::make_pair(v, part), std::move(all)).first;
  }
  return it->second;
}

const Carried& StepPackings::Carries(int u, int j, int pu, int w, int pw) {
  const auto key = std::make_tuple(u, j, pu, w, pw);
  if (auto found = carried_.find(key); found != carried_.end()) return found->second;
  const MicrobatchPacking& all = At(u, j, pu);
  const std::set<int>& reads = StageSamples(w, pw);
  Carried& c = carried_[key];  // a map node: `kept` stays where `packing` points
  c.packing = &all;
  for (const auto& sequences : all.modules) {
    for (const auto& s : sequences) c.whole = c.whole && reads.count(s.sample) > 0;
  }
  if (c.whole) return c;
  c.kept.modules.resize(all.modules.size());
  c.rows.resize(all.modules.size());
  for (size_t m = 0; m < all.modules.size(); ++m) {
    int64_t offset = 0;
    for (const auto& s : all.modules[m]) {
      if (reads.count(s.sample) > 0) {
        c.kept.modules[m].push_back(s);
        auto& runs = c.rows[m];
        if (!runs.empty() && runs.back().first + runs.back().second == offset) {
          runs.back().second += s.tokens;
        } else if (s.tokens > 0) {
          runs.push_back({offset, s.tokens});
        }
      }
      offset += s.tokens;
    }
  }
  c.packing = &c.kept;
  return c;
}

std::vector<Partner> Partners(const Transfer& t, bool sends, const ProcessPlace& place, const StepPackings& packings) {
  const int sender = t.Sender(), receiver = t.Receiver();
  std::vector<Partner> out;
  for (int q = 0; q < place.group_gpus; ++q) {
    const int send_shard = sends ? place.shard : q, receive_shard = sends ? q : place.shard;
    if (place.TpRankOf(receiver, receive_shard) % place.TpOf(sender) != place.TpRankOf(sender, send_shard)) continue;
    const int producer_part = place.PartOf(t.producer, t.activation ? send_shard : receive_shard);
    const int consumer_part = place.PartOf(t.consumer, t.activation ? receive_shard : send_shard);
    if (!packings.Paired(t.producer, t.mb, producer_part, t.consumer, t.consumer_mb, consumer_part)) continue;
    out.push_back({q, MessageKey{t.producer, t.consumer, t.mb, t.consumer_mb, place.PartOf(sender, send_shard)},
                   producer_part, consumer_part});
  }
  return out;
}

}  // namespace loom::runtime
