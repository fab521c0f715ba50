// Context parallelism (Megatron-LM's CP) in the runtime: the `size` ranks of a
// CP group split every packed sequence of a stage's modules between them and
// attend across the split by ring attention.
//
// Slicing. Each packed sequence of length L is cut into 2 * size chunks
// (boundaries floor(i L / (2 size))); rank c holds chunks c and 2 size - 1 - c,
// so under a causal mask every rank does the same attention work (Megatron's
// load-balanced split; a plain split gives the last rank the most). A
// module's rows on rank c are those chunks of its sequences in packing order.
//
// Two ways to attend across the split (AttentionLayout::all_gather):
//
// Ring attention (Megatron-LM's, the zigzag split). Each rank keeps its queries; the K/V blocks of all ranks
// pass around the ring (rank c sends to c + 1), one step per rank, and each
// step's partial softmax is merged online (running max and sum). The backward
// runs the ring again carrying K, V and their gradient accumulators, so each
// block's dK/dV come home after one more hop. Masks follow each token's
// sequence and position, so packed sequences never attend to each other.
//
// All-gathered K/V (Cornstarch §3.3.2, the thesis' design; the balanced split
// and every module with bitfield attention, whatever the split). Each rank
// gathers every rank's K and V rows into the whole sequence's K/V (in packing
// order) and attends its own queries over them under the module's mask, by the
// blocked path of runtime/bitfield_attention.h: a query block visits only the
// KV blocks its mask reads, so a rank's work is its rows' block work, which
// the balanced split evened out. The backward all-reduces the whole K/V
// gradient and keeps each rank's rows (GatherContext). A mask is per row of
// the packed tensor, so which rank holds a token never changes what it
// reads: positions are those of the packing (position embeddings are added
// before the split, the runtime has no RoPE), and labels follow their rows.
// Loom's K/V all-gather is one collective per layer, not the thesis'
// head-wise overlap with compute.
//
// Only a stage's inside is sliced: tensors crossing stages travel whole
// (gathered at the stage's end), and a layer that builds a module's tokens
// from data or from other modules (embeddings, projector splices) runs on the
// whole sequence and is sliced after. Torch-heavy: runtime translation units only.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

#include "loom/cost/cp_assignment.h"
#include "loom/data/attention_mask.h"
#include "loom/runtime/packing.h"
#include "loom/runtime/rotary.h"

namespace loom::runtime {

struct ContextParallel {
  int rank = 0;
  int size = 1;
  // How each sequence's rows split over the ranks (the stage's Unit::cp_split):
  // zigzag per sequence (ideal runs as zigzag), or Cornstarch's balanced LPT
  // over causal blocks of kCpBlockTokens.
  CpSplit split = CpSplit::kZigzag;
  // Sends `t` to rank + 1 and returns what rank - 1 sent (the same shape on every rank).
  std::function<torch::Tensor(const torch::Tensor&)> ring;
  // Sums a tensor over the group, in place.
  std::function<void(torch::Tensor&)> all_reduce;
  // Every rank's tensor (equal shapes), in rank order.
  std::function<std::vector<torch::Tensor>(const torch::Tensor&)> all_gather;
};

// Rows of `module`'s packed tokens that CP rank `rank` of `size` holds, ascending:
// each sequence's 2 x size zigzag chunks, or (balanced) blocks of
// kCpBlockTokens of every sequence assigned by LPT on their causal work (block
// b of a sequence reads b + 1 blocks), as the simulator prices `balanced`.
constexpr int64_t kCpBlockTokens = 128;
std::vector<int64_t> ContextRows(const MicrobatchPacking& packing, int module, int rank, int size,
                                 CpSplit split = CpSplit::kZigzag);

// Who attends to whom: the packed sequences' lengths (no CP), or with CP every
// rank's rows as (sequence, position) pairs, padded with -1 to the longest.
// Shared with recomputation (a checkpoint keeps it for its backward).
struct AttentionLayout : torch::CustomClassHolder {
  std::vector<int64_t> lengths;
  torch::Tensor seq, pos, index;   // [size, max rows]: sequence, position, row in the whole tensor (CP only)
  std::vector<int64_t> rows;       // rows per rank (CP only)
  int64_t tokens = 0;              // of the whole module tensor
  torch::Tensor mine;              // this rank's rows of the packed module, [rows] long (CP only)
  std::vector<int64_t> mine_rows;  // the same, on the host (CP only)
  // A module with bitfield attention (Module::bitfield_attention): the packed
  // row's mask, each packed sequence a document, input i's tokens modality i.
  BitfieldMask mask;
  // CP attends by all-gathered K/V (else ring). A module without a bitfield
  // mask then reads the document mask of its causality (DocumentMask).
  bool all_gather = false;
  BitfieldMask causal_mask, full_mask;  // document masks, built on first use
  // KvBlocks of the mask each layer attends under, built on its first layer
  // and kept for the rest (keyed by the mask's address, mask, causal_mask or
  // full_mask, and the block size).
  struct CachedBlocks {
    const BitfieldMask* mask;
    int64_t block_tokens;
    std::vector<std::vector<int64_t>> blocks;
  };
  std::vector<CachedBlocks> kv_blocks;
  const std::vector<std::vector<int64_t>>& KvBlocksOf(const BitfieldMask& m, int64_t block_tokens);
  // Each of this process's rows' position in its packed sequence ([rows],
  // int64, on `device`; made on first use): rotary positions restart at every
  // sequence, as transformers' position_ids do for packed sequences
  // (DataCollatorWithFlattening). With CP, this rank's rows only.
  const torch::Tensor& RowPositions(const torch::Device& device);
  torch::Tensor row_positions;
  // Rotary cos/sin of these rows (MakeRopeTables at RowPositions) for
  // `inverse_frequencies` in `dtype`, made on first use: the layers of a
  // module share one pair per microbatch, kept once for their backwards (the
  // memory model prices none), not a pair per layer.
  const RopeTables& RopeTablesOf(const torch::Tensor& inverse_frequencies, const torch::Device& device,
                                 torch::ScalarType dtype);
  struct CachedRope {
    torch::Tensor inverse_frequencies;
    torch::ScalarType dtype;
    RopeTables tables;
  };
  std::deque<CachedRope> rope;  // a deque: references stay valid as it grows
};
// Document attention as a bitfield mask: each packed sequence a document, its
// tokens text (causal) or, not causal, one modality (each reads its whole document).
BitfieldMask DocumentMask(const std::vector<int64_t>& lengths, bool causal);
// `spec`: the module (its bitfield flag and inputs); null: document attention.
c10::intrusive_ptr<AttentionLayout> MakeAttentionLayout(const MicrobatchPacking& packing, int module,
                                                        const ContextParallel& cp, const torch::Device& device,
                                                        const Module* spec = nullptr);

// Softmax attention of this rank's queries q [1, rows, heads, d] over every
// rank's keys and values (k, v: this rank's rows, [1, rows, kv heads, d],
// kv heads dividing heads: grouped-query heads unexpanded) around the ring.
// Computed in fp32 whatever q's dtype (the blocks travel in fp32); the
// output, and what it keeps for its backward, in q's.
torch::Tensor RingAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                            const c10::intrusive_ptr<AttentionLayout>& layout, bool causal, ContextParallel* cp);

// This rank's queries q [1, rows, heads, d] over every rank's keys and values
// (k, v: this rank's rows) gathered whole, under the module's bitfield mask or
// its document mask (`causal`), in blocks of `block_tokens`.
torch::Tensor AllGatherAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 const c10::intrusive_ptr<AttentionLayout>& layout, bool causal, int64_t block_tokens,
                                 ContextParallel* cp);

// The whole module tensor [1, tokens, width] from every rank's rows (`x`:
// this rank's); its backward sums the whole gradient over the ranks and keeps
// this rank's rows (each rank's consumers may read any row).
torch::Tensor GatherContext(const torch::Tensor& x, const c10::intrusive_ptr<AttentionLayout>& layout,
                            ContextParallel* cp);

}  // namespace loom::runtime
