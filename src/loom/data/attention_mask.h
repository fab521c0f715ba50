// Cornstarch's bitfield attention masks (seed 004 §3.4.2, Fig. 3.4): instead
// of an S x S mask, one 64-bit field per token says what it may attend to.
//   bit 0          the LLM's own (text) tokens;
//   bit 1 + i      tokens of the model's modality encoder i (vision, audio, ...);
//   bit 63         causal: the token attends only to itself and earlier tokens.
// A text token sets bit 0, the causal bit and the bits of every modality it
// may read; a modality token sets its own modality's bit only.
//
// Which key a query may attend to (the thesis leaves it unsaid; Loom follows
// the released code's rule, notes/oobleck-cornstarch-entrain.md §3.4, but
// reads the causal bit instead of hard-wiring causality for text):
//   - a text query q reads key k when their fields share a bit below 63, and
//     k <= q if q has the causal bit;
//   - a modality query reads exactly the keys with its own field
//     (bidirectional attention among the modality's tokens).
// Sample boundaries: the field encodes none, so packed sequences (Fig. 3.5c)
// would let documents see each other. Loom keeps a document id beside each
// field (as FlashAttention's variable-length form keeps sequence offsets), and
// no token reads another document's.
#pragma once

#include <cstdint>
#include <vector>

namespace loom {

constexpr int kTextBit = 0;
constexpr int kCausalBit = 63;

struct MaskToken {
  uint64_t bits = 0;
  int32_t doc = 0;
};

// Token i of the sequence is element i.
using BitfieldMask = std::vector<MaskToken>;

bool MayAttend(const BitfieldMask& mask, int64_t query, int64_t key);

// A run of tokens of one kind in a document: `modality` -1 for text, else the
// encoder's index (bit 1 + modality).
struct MaskSegment {
  int64_t tokens = 0;
  int modality = -1;
  int doc = 0;
};

// The three layouts Cornstarch evaluates (Fig. 3.5):
//   kCausalPrefix: in each document, its modality tokens first, then its text;
//   kEmbedded: modality tokens where the segments put them, inside the text;
//   kPacked: like kEmbedded, several documents one after another in one
//            sequence (the segments' doc ids), none reading another's tokens.
// Text tokens are causal and read text and every modality; modality tokens
// read their own modality's tokens of their document.
enum class MaskLayout : uint8_t { kCausalPrefix = 0, kEmbedded = 1, kPacked = 2 };

// The mask of `segments` (in sequence order) under `layout`. Throws
// loom::Error for a negative token count, a modality past 61 or a document id
// below 0.
BitfieldMask BuildMask(const std::vector<MaskSegment>& segments, MaskLayout layout);

// The number of (query, key) pairs the mask of `segments` under `layout`
// allows, from the segments in O(segments x modalities), never the mask:
// a text token reads every earlier token of its document and itself, a
// modality token every token of its modality in its document. What the
// simulator prices a bitfield-masked layer's attention by (TokenStats::mask_pairs):
// KeysInRanges over the whole sequence. Throws as BuildMask does.
double AllowedPairs(const std::vector<MaskSegment>& segments, MaskLayout layout);

// Document attention as segments: each sequence of `lengths` a document of
// its own, its tokens text (causal) or, not causal, one modality (every token
// reads its whole document). What a module without a bitfield mask attends
// under, for the simulator's CP pricing and the runtime's all-gather CP alike.
std::vector<MaskSegment> DocumentSegments(const std::vector<int64_t>& lengths, bool causal);

// Per query token, the number of keys it may read (MayAttend), in
// O(tokens x distinct fields per document), never the S x S mask.
std::vector<int64_t> KeysPerQuery(const BitfieldMask& mask);

// The same block work and keys of BuildMask(segments, layout), from the
// segments without building the mask: a text token reads every token of its
// document up to itself, a modality token every token of its modality in its
// document. O(blocks x segments of a document) and no per-token memory: what
// the simulator prices CP with, per microbatch and candidate
// (cost/cp_assignment.h). Throw as BuildMask does; block_tokens >= 1.
std::vector<int64_t> BlockWorkOfSegments(const std::vector<MaskSegment>& segments, MaskLayout layout,
                                         int64_t block_tokens);
// Keys per query summed over each range [bounds[i], bounds[i + 1]) of the
// sequence's positions (bounds ascending), the segments placed once: zigzag
// CP's chunks, or {0, T} for the whole mask.
std::vector<double> KeysInRanges(const std::vector<MaskSegment>& segments, MaskLayout layout,
                                 const std::vector<int64_t>& bounds);

// Block-sparse attention's work (Cornstarch §3.3.2.1): per query block of
// `block_tokens` tokens (the last one short), the number of KV blocks holding
// at least one key some query of the block may read; a kernel skips the rest.
// O(blocks^2 x groups^2) from per-block summaries, never the S x S mask.
std::vector<int64_t> BlockWork(const BitfieldMask& mask, int64_t block_tokens);
// Those KV blocks themselves, ascending, per query block (what a block-sparse
// kernel visits).
std::vector<std::vector<int64_t>> KvBlocks(const BitfieldMask& mask, int64_t block_tokens);

}  // namespace loom
