#include "loom/strategies/entrain/deferral_schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "loom/error.h"

namespace loom {

ReplicaDeferralSchedule SplitForDeferral(const std::vector<std::vector<int>>& microbatches, const DeferralPlan& plan) {
  const int K = static_cast<int>(microbatches.size());
  std::vector<int> seen(K, 0);
  for (int m : plan.order) {
    if (m < 0 || m >= K) throw Error(fmt::format("entrain: the deferral order names microbatch {} of {}", m, K));
    ++seen[m];
  }
  if (std::any_of(seen.begin(), seen.end(), [](int n) { return n != 1; })) {
    throw Error(fmt::format("entrain: the deferral order must name each of the {} microbatches once", K));
  }
  ReplicaDeferralSchedule out;
  auto add_piece = [&](std::vector<int> samples, int f, int b) {
    if (!samples.empty()) out.pieces.push_back({std::move(samples), f, b});
  };
  std::set<int> paired;
  for (const DeferralPair& p : plan.pairs) {
    const std::set<int> moved(p.deferred.begin(), p.deferred.end());
    std::vector<int> kept;
    for (int x : microbatches[p.overloaded]) {
      if (!moved.count(x)) kept.push_back(x);
    }
    std::vector<int> deferred = p.deferred;
    if (kept.empty()) {  // never leave the overloaded slot's LLM microbatch empty
      kept = microbatches[p.overloaded];
      deferred.clear();
    }
    const int s = out.slots();
    add_piece(kept, s, s);
    add_piece(deferred, s, s + 1);
    add_piece(microbatches[p.underloaded], s + 1, s + 1);
    out.llm_microbatches.push_back(kept);
    std::vector<int> next = deferred;
    next.insert(next.end(), microbatches[p.underloaded].begin(), microbatches[p.underloaded].end());
    out.llm_microbatches.push_back(std::move(next));
    out.deferred_samples.insert(out.deferred_samples.end(), deferred.begin(), deferred.end());
    paired.insert(p.overloaded);
    paired.insert(p.underloaded);
  }
  // Microbatches in no pair (odd K's median), in the plan's order.
  for (int m : plan.order) {
    if (paired.count(m)) continue;
    const int s = out.slots();
    add_piece(microbatches[m], s, s);
    out.llm_microbatches.push_back(microbatches[m]);
  }
  return out;
}

std::vector<StageStep> SlotOneFOneB(const std::vector<int>& forward_slot, const std::vector<int>& backward_slot,
                                    int warmup_slots, int stage, int weight_lag) {
  const int n = static_cast<int>(forward_slot.size());
  if (static_cast<int>(backward_slot.size()) != n) throw Error("entrain: one backward slot per forward slot");
  int slots = 0;
  for (int i = 0; i < n; ++i) {
    if (backward_slot[i] < forward_slot[i] || forward_slot[i] < 0) {
      throw Error(fmt::format("entrain: item {} runs its backward in slot {}, before its forward's slot {}", i,
                              backward_slot[i], forward_slot[i]));
    }
    slots = std::max(slots, backward_slot[i] + 1);
  }
  const int w = std::max(0, warmup_slots);
  std::vector<StageStep> order;
  auto forwards = [&](int lo, int hi) {  // slots [lo, hi)
    for (int i = 0; i < n; ++i) {
      if (forward_slot[i] >= lo && forward_slot[i] < hi) order.push_back({true, stage, i});
    }
  };
  std::vector<int> done;  // items whose data half ran, in order
  size_t weights = 0;     // weight halves emitted
  auto backwards = [&](int s) {
    for (int i = 0; i < n; ++i) {
      if (backward_slot[i] != s) continue;
      if (weight_lag < 0) {
        order.push_back({false, stage, i});
        continue;
      }
      order.push_back({false, stage, i, BackwardPart::kData});
      done.push_back(i);
      if (done.size() > static_cast<size_t>(weight_lag)) {
        order.push_back({false, stage, done[weights++], BackwardPart::kWeight});
      }
    }
  };
  forwards(0, w);
  for (int t = 0; t < slots; ++t) {
    if (w + t < slots) forwards(w + t, w + t + 1);
    backwards(t);
  }
  while (weights < done.size()) order.push_back({false, stage, done[weights++], BackwardPart::kWeight});
  return order;
}

}  // namespace loom
