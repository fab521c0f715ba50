// Which CP rank computes which query blocks of a sequence, and what that
// costs (Cornstarch §3.3.2; block work from data/attention_mask.h). With
// all-gathered K/V (the design Cornstarch uses) a query block's cost is its
// row of non-empty KV blocks, wherever it runs, so balancing is partitioning
// the rows.
//   - Zigzag (Megatron's causal split): the blocks in 2 x cp contiguous
//     chunks, rank i taking chunks i and 2cp - 1 - i. Exactly balanced for a
//     causal mask, not for masks that depend on the input.
//   - Balanced (Cornstarch Algorithm 1): LPT over the blocks (algo/lpt.h).
//     The thesis' pseudocode never sorts; its prose says LPT, which sorts by
//     descending work: on Fig. 3.3a's work 1,2,2,4,5,2,2,8 over 4 GPUs the
//     sorted version gives loads 8,6,6,6, the unsorted one 6,12,4,4
//     (zigzag: 9,4,4,9).
// Inside a GPU (§3.3.2.2) a FlashAttention-style kernel runs one query
// block's whole KV row on one compute unit; long rows idle the others.
// Splitting rows into sub-blocks of at most `subblock` KV blocks (partial
// outputs merged by an aggregation pass, not counted here) lets them spread.
// The hardware starts tiles in grid order, each on the first unit to free up
// (list scheduling, not LPT): the order is why whole rows leave units idle.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/data/attention_mask.h"

namespace loom {

// How a plan splits each sequence over its CP ranks (Unit::cp_split):
//   kIdeal: 1/cp of the attention pairs each (Loom's model before issue 18);
//   kZigzag: Megatron's split, priced from the batch's actual masks;
//   kBalanced: Cornstarch's LPT over mask blocks, likewise. Append-only.
enum class CpSplit : uint8_t { kIdeal = 0, kZigzag = 1, kBalanced = 2 };
const char* CpSplitName(CpSplit s);
// Throws loom::Error naming `field` and the valid names.
CpSplit ParseCpSplit(const std::string& name, const std::string& field);

struct CpAssignment {
  std::vector<int> rank_of_block;  // per query block
  std::vector<double> rank_work;   // per rank: KV blocks it computes
  double max_work() const;
  // max over ranks / mean: 1 is perfect balance.
  double imbalance() const;
};

// Throws loom::Error for cp < 1 or negative work.
CpAssignment ZigzagAssignment(const std::vector<int64_t>& block_work, int cp);
CpAssignment BalancedAssignment(const std::vector<int64_t>& block_work, int cp);

// A rank's attention kernel over `units` compute units, in KV-block steps:
// each of its tiles' rows (`rows`: KV blocks per row, in grid order) runs
// whole on one unit (subblock 0), or cut into pieces of at most `subblock` KV
// blocks that follow one another in the grid; each tile or piece starts on the
// first unit to free up. Returns the last unit's finish.
double KernelMakespan(const std::vector<int64_t>& rows, int units, int subblock);

// What Cornstarch's intra-GPU split (§3.3.2.2) saves on a CP stage: the
// busiest rank's kernel with rows cut into sub-blocks over its kernel with
// rows whole, each rank's tiles its query blocks' rows x `heads` over
// `units`. Loom's attention costs are fitted to whole-row kernels, so the
// ratio is what the split changes. Each kernel is estimated by Graham's bound
// for list scheduling, work / units + longest piece x (1 - 1 / units): the
// exact grid-order makespan (KernelMakespan) costs a heap operation per tile,
// too slow for every microbatch of every candidate (bench/cornstarch_bench
// runs it exactly). Long rows among few tiles make the tail; many tiles hide it.
struct KernelShape {
  int64_t heads = 1;  // per GPU (after TP)
  int units = 1;      // the GPU's SMs
  int subblock = 16;  // KV blocks per piece (the thesis leaves it open)
};
// Throws loom::Error for heads, units or subblock below 1.
double SubBlockFactor(const std::vector<std::vector<int64_t>>& rank_rows, const KernelShape& kernel);

// The busiest CP rank's attention work over the average, for sequences
// `rows` (each the segments of a mask under `layout`, data/attention_mask.h)
// over the same cp ranks (kIdeal: 1): zigzag splits each row's tokens on its
// own (Megatron-LM's per-sequence split of packed "thd" batches, the
// runtime's ContextRows) and a rank's work is its queries' keys; balanced
// assigns every row's blocks of `block_tokens` together by LPT on their
// block work. Read off the segments, never a per-token mask. Multiplies the
// 1/cp share of attention pairs. With `kernel`, the balanced split (all of
// Cornstarch's CP) also gets its intra-GPU split's SubBlockFactor.
double CpImbalance(const std::vector<std::vector<MaskSegment>>& rows, MaskLayout layout, int cp, CpSplit split,
                   int64_t block_tokens, const KernelShape* kernel = nullptr);

}  // namespace loom
