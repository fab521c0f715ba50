#include "loom/data/attention_mask.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "loom/error.h"

namespace loom {

namespace {

constexpr uint64_t kCausal = uint64_t{1} << kCausalBit;
constexpr uint64_t kModalityBits = kCausal - 1;  // bits 0..62

bool IsText(uint64_t bits) { return (bits & 1) != 0; }

// The tokens of one block that share a field and document: all a query or
// key needs to know about them (positions only bound causality).
struct TokenGroup {
  uint64_t bits = 0;
  int32_t doc = 0;
  int64_t first = 0, last = 0;  // positions
};

std::vector<std::vector<TokenGroup>> Summaries(const BitfieldMask& mask, int64_t block_tokens) {
  const int64_t n = static_cast<int64_t>(mask.size());
  std::vector<std::vector<TokenGroup>> out((n + block_tokens - 1) / block_tokens);
  for (int64_t i = 0; i < n; ++i) {
    auto& groups = out[i / block_tokens];
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const TokenGroup& g) { return g.bits == mask[i].bits && g.doc == mask[i].doc; });
    if (it == groups.end()) {
      groups.push_back({mask[i].bits, mask[i].doc, i, i});
    } else {
      it->last = i;
    }
  }
  return out;
}

// Whether some query of group q may read some key of group k (MayAttend over the groups).
bool GroupsMeet(const TokenGroup& q, const TokenGroup& k) {
  if (q.doc != k.doc) return false;
  if (!IsText(q.bits)) return q.bits == k.bits;
  if ((q.bits & k.bits & kModalityBits) == 0) return false;
  return (q.bits & kCausal) == 0 || k.first <= q.last;
}

}  // namespace

bool MayAttend(const BitfieldMask& mask, int64_t query, int64_t key) {
  const MaskToken &q = mask.at(query), &k = mask.at(key);
  if (q.doc != k.doc) return false;
  if (!IsText(q.bits)) return q.bits == k.bits;
  if ((q.bits & k.bits & kModalityBits) == 0) return false;
  return (q.bits & kCausal) == 0 || key <= query;
}

namespace {

// The segments in sequence order under `layout`, checked.
std::vector<MaskSegment> InOrder(const std::vector<MaskSegment>& segments, MaskLayout layout) {
  for (size_t i = 0; i < segments.size(); ++i) {
    const MaskSegment& s = segments[i];
    if (s.tokens < 0 || s.modality < -1 || s.modality > 61 || s.doc < 0) {
      throw Error(
          fmt::format("attention mask: segment {}: tokens {}, modality {}, doc {}; valid: tokens >= 0, "
                      "modality -1 (text) or 0..61, doc >= 0",
                      i, s.tokens, s.modality, s.doc));
    }
  }
  std::vector<MaskSegment> order = segments;
  if (layout == MaskLayout::kCausalPrefix) {
    // Per document (in order of first appearance), its modality segments, then its text.
    std::vector<int> docs;
    for (const auto& s : segments) {
      if (std::find(docs.begin(), docs.end(), s.doc) == docs.end()) docs.push_back(s.doc);
    }
    order.clear();
    for (int d : docs) {
      for (const bool text : {false, true}) {
        for (const auto& s : segments) {
          if (s.doc == d && (s.modality < 0) == text) order.push_back(s);
        }
      }
    }
  }
  return order;
}

}  // namespace

BitfieldMask BuildMask(const std::vector<MaskSegment>& segments, MaskLayout layout) {
  const std::vector<MaskSegment> order = InOrder(segments, layout);
  uint64_t all_modalities = 0;
  for (const auto& s : order) {
    if (s.modality >= 0) all_modalities |= uint64_t{1} << (1 + s.modality);
  }
  BitfieldMask mask;
  for (const auto& s : order) {
    const uint64_t bits = s.modality < 0 ? (uint64_t{1} | all_modalities | kCausal) : uint64_t{1} << (1 + s.modality);
    for (int64_t t = 0; t < s.tokens; ++t) mask.push_back({bits, s.doc});
  }
  return mask;
}

std::vector<int64_t> KeysPerQuery(const BitfieldMask& mask) {
  std::map<std::pair<int32_t, uint64_t>, int64_t> total, seen;  // per (document, field): tokens
  for (const MaskToken& t : mask) ++total[{t.doc, t.bits}];
  std::vector<int64_t> out(mask.size(), 0);
  for (size_t i = 0; i < mask.size(); ++i) {
    const MaskToken& q = mask[i];
    ++seen[{q.doc, q.bits}];
    if (!IsText(q.bits)) {
      out[i] = total[{q.doc, q.bits}];  // exactly its own field, both ways
      continue;
    }
    const auto& counts = (q.bits & kCausal) != 0 ? seen : total;  // causal: keys up to and including itself
    for (auto it = counts.lower_bound({q.doc, 0}); it != counts.end() && it->first.first == q.doc; ++it) {
      if ((it->first.second & q.bits & kModalityBits) != 0) out[i] += it->second;
    }
  }
  return out;
}

namespace {

// The ordered segments with their positions, for reading the mask's rule
// off the segments (BlockWorkOfSegments, KeysInRanges).
struct Placed {
  MaskSegment seg;
  int64_t begin = 0, end = 0;  // positions [begin, end)
  double doc_before = 0;       // tokens of its document before it
  double modality_total = 0;   // modality segments: all tokens of its modality in its document
};

std::vector<Placed> Place(const std::vector<MaskSegment>& segments, MaskLayout layout) {
  std::vector<Placed> out;
  std::map<int, double> doc_tokens;
  std::map<std::pair<int, int>, double> modality_tokens;
  int64_t at = 0;
  for (const auto& s : InOrder(segments, layout)) {
    Placed p{s, at, at + s.tokens, doc_tokens[s.doc], 0};
    doc_tokens[s.doc] += static_cast<double>(s.tokens);
    if (s.modality >= 0) modality_tokens[{s.doc, s.modality}] += static_cast<double>(s.tokens);
    at += s.tokens;
    out.push_back(p);
  }
  for (auto& p : out) {
    if (p.seg.modality >= 0) p.modality_total = modality_tokens[{p.seg.doc, p.seg.modality}];
  }
  return out;
}

}  // namespace

std::vector<int64_t> BlockWorkOfSegments(const std::vector<MaskSegment>& segments, MaskLayout layout,
                                         int64_t block_tokens) {
  if (block_tokens < 1) throw Error(fmt::format("attention mask: block of {} tokens; valid: >= 1", block_tokens));
  const std::vector<Placed> placed = Place(segments, layout);
  const int64_t T = placed.empty() ? 0 : placed.back().end;
  std::map<int, std::vector<const Placed*>> of_doc;
  for (const auto& p : placed) {
    if (p.seg.tokens > 0) of_doc[p.seg.doc].push_back(&p);
  }
  std::vector<int64_t> work;
  std::vector<std::pair<int64_t, int64_t>> ranges;  // KV block ranges [first, last] the block reads
  size_t first_seg = 0;
  for (int64_t q0 = 0; q0 < T; q0 += block_tokens) {
    const int64_t q1 = std::min(T, q0 + block_tokens);
    ranges.clear();
    while (placed[first_seg].end <= q0) ++first_seg;
    for (size_t k = first_seg; k < placed.size() && placed[k].begin < q1; ++k) {
      const Placed& q = placed[k];
      if (q.seg.tokens == 0) continue;
      const int64_t last = std::min(q1, q.end) - 1;  // the segment's last query in this block
      for (const Placed* key : of_doc[q.seg.doc]) {
        int64_t end = key->end;
        if (q.seg.modality >= 0) {
          if (key->seg.modality != q.seg.modality) continue;  // its own modality, both ways
        } else {
          end = std::min(end, last + 1);  // text: its document up to itself
          if (end <= key->begin) continue;
        }
        ranges.push_back({key->begin / block_tokens, (end - 1) / block_tokens});
      }
    }
    std::sort(ranges.begin(), ranges.end());
    int64_t count = 0, covered = -1;  // blocks counted, last block counted
    for (const auto& [a, b] : ranges) {
      if (b <= covered) continue;
      count += b - std::max(a, covered + 1) + 1;
      covered = b;
    }
    work.push_back(count);
  }
  return work;
}

std::vector<double> KeysInRanges(const std::vector<MaskSegment>& segments, MaskLayout layout,
                                 const std::vector<int64_t>& bounds) {
  const std::vector<Placed> placed = Place(segments, layout);
  std::vector<double> keys(bounds.size() < 2 ? 0 : bounds.size() - 1, 0.0);
  size_t first = 0;  // the first segment a range may overlap (ranges ascend)
  for (size_t r = 0; r + 1 < bounds.size(); ++r) {
    const int64_t begin = bounds[r], end = bounds[r + 1];
    while (first < placed.size() && placed[first].end <= begin) ++first;
    for (size_t k = first; k < placed.size() && placed[k].begin < end; ++k) {
      const Placed& p = placed[k];
      const int64_t a = std::max(begin, p.begin), b = std::min(end, p.end);
      if (a >= b) continue;
      const double n = static_cast<double>(b - a);
      if (p.seg.modality >= 0) {
        keys[r] += n * p.modality_total;  // its modality in its document, both ways
      } else {
        // Position x reads doc_before + (x - p.begin) + 1 keys: an arithmetic series over [a, b).
        const double first_keys = p.doc_before + static_cast<double>(a - p.begin) + 1;
        keys[r] += n * first_keys + n * (n - 1) / 2;
      }
    }
  }
  return keys;
}

double AllowedPairs(const std::vector<MaskSegment>& segments, MaskLayout layout) {
  int64_t tokens = 0;
  for (const auto& s : segments) tokens += std::max<int64_t>(0, s.tokens);
  return KeysInRanges(segments, layout, {0, tokens}).front();
}

std::vector<MaskSegment> DocumentSegments(const std::vector<int64_t>& lengths, bool causal) {
  std::vector<MaskSegment> out;
  for (size_t i = 0; i < lengths.size(); ++i) out.push_back({lengths[i], causal ? -1 : 0, static_cast<int>(i)});
  return out;
}

std::vector<std::vector<int64_t>> KvBlocks(const BitfieldMask& mask, int64_t block_tokens) {
  if (block_tokens < 1) throw Error(fmt::format("attention mask: block of {} tokens; valid: >= 1", block_tokens));
  const auto blocks = Summaries(mask, block_tokens);
  std::vector<std::vector<int64_t>> out(blocks.size());
  for (size_t qb = 0; qb < blocks.size(); ++qb) {
    for (size_t kb = 0; kb < blocks.size(); ++kb) {
      bool meet = false;
      for (const TokenGroup& q : blocks[qb]) {
        for (const TokenGroup& k : blocks[kb]) meet = meet || GroupsMeet(q, k);
      }
      if (meet) out[qb].push_back(static_cast<int64_t>(kb));
    }
  }
  return out;
}

std::vector<int64_t> BlockWork(const BitfieldMask& mask, int64_t block_tokens) {
  std::vector<int64_t> work;
  for (const auto& row : KvBlocks(mask, block_tokens)) work.push_back(static_cast<int64_t>(row.size()));
  return work;
}

}  // namespace loom
