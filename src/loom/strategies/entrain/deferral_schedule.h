// Entrain's deferral-aware pipeline schedule (seed 004 §4.5.3): what one
// data-parallel replica's encoder and LLM run after pairwise deferral
// (deferral.h), as microbatches and per-rank orders the spine compiles
// (IterationSchedule::replica_microbatch_samples, unit_rank_orders).
//
// Slots. Execution slot s is the s-th microbatch of the deferral order. The
// encoder forwards overloaded microbatch i in its slot s and its partner j in
// s + 1; the LLM runs i's kept samples in slot s and i's deferred samples with
// j's in s + 1. So an encoder microbatch becomes pieces that each feed one
// LLM microbatch: A (i's kept samples: forward s, backward s), B (i's
// deferred samples: forward s, backward s + 1, its activations buffered one
// slot) and C (j: forward and backward s + 1). A piece is one encoder
// microbatch of the compiled plan; A and B run back to back, the forward of
// the thesis' one microbatch cut in two (one more set of kernel launches) so
// that its backward can be split.
//
// Split backward: an encoder rank runs a piece's backward in the slot of the
// LLM microbatch that consumed it (A's in s, B's in s + 1), not the whole
// microbatch's when its last sample's gradient arrives.
// Eager forward: 1F1B counted in slots. Rank r of a chain of `depth` stages
// warms up with the forwards of slots [0, depth - r - 1 + eager), then per
// steady slot t forwards slot warm-up + t and runs the backwards of slot t.
// `eager` extra slots (Loom's memory cap, the thesis leaves it open: one
// slot, the deferral's own buffering horizon) let the encoder run ahead of
// the back-loaded deferred backwards. Deadlock-free: a piece's forward slot
// never follows its backward slot, and the LLM's slot t needs forwards of
// slots <= t only (the 1F1B argument, in slots).
// Zero-bubble compatible: with `weight_lag` >= 0 every backward is split into
// its data half (in the backward's place) and its weight half, which runs
// right after the data half `weight_lag` backwards later (ZB-H1's rule,
// pipeline/zb_h1.cpp: rank r of the chain lags r), the last ones at the end.
#pragma once

#include <vector>

#include "loom/plan/plan.h"
#include "loom/strategies/entrain/deferral.h"

namespace loom {

struct EncoderPiece {
  std::vector<int> samples;  // sample indices (a subset of one stratified microbatch)
  int forward_slot = 0;
  int backward_slot = 0;  // the slot of the LLM microbatch that consumes it
};

struct ReplicaDeferralSchedule {
  std::vector<EncoderPiece> pieces;                // the encoder's microbatches, in forward order
  std::vector<std::vector<int>> llm_microbatches;  // one per slot: the deferred samples first, then the slot's own
  // Extra LLM-side samples each slot carries (for buffer accounting): the deferred ones.
  std::vector<int> deferred_samples;
  int slots() const { return static_cast<int>(llm_microbatches.size()); }
};

// The pieces and LLM microbatches of one replica. `microbatches`: the
// stratified microbatches (sample indices); `plan`: their pairwise deferral.
// A pair whose overloaded microbatch would keep no sample defers nothing (an
// LLM microbatch is never empty). Throws loom::Error when `plan` does not
// order every microbatch exactly once.
ReplicaDeferralSchedule SplitForDeferral(const std::vector<std::vector<int>>& microbatches, const DeferralPlan& plan);

// One pipeline rank's compute order over a stage: 1F1B in slots (see above).
// Item n (a piece or an LLM microbatch) forwards in forward_slot[n] and runs
// its backward in backward_slot[n] >= forward_slot[n]; items of one slot go in
// index order. `warmup_slots` >= 0 (0: the last stage, F then B per slot). Throws loom::Error on a backward slot
// before its forward slot.
std::vector<StageStep> SlotOneFOneB(const std::vector<int>& forward_slot, const std::vector<int>& backward_slot,
                                    int warmup_slots, int stage, int weight_lag = -1);

}  // namespace loom
