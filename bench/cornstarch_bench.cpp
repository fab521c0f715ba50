// Cornstarch's mask work and CP assignment (issue 18): what pricing a CP
// stage from the batch's masks costs per sequence (BlockWork from per-block
// summaries, then zigzag or LPT over the blocks), at the thesis' 16K-64K
// tokens with N_B = 128, for a packed row of documents with images amid
// their text; and the blocked attention kernel's block-pair count against T^2.
#include <benchmark/benchmark.h>

#include <array>
#include <random>

#include "loom/cost/cp_assignment.h"
#include "loom/data/attention_mask.h"

namespace loom {
namespace {

// Documents of ~4K tokens, each text / image (1024 tokens) / text, to `tokens` in all.
std::vector<MaskSegment> PackedSegments(int64_t tokens) {
  std::vector<MaskSegment> segments;
  std::mt19937 rng(1);
  int64_t used = 0;
  for (int doc = 0; used < tokens; ++doc) {
    const int64_t text = std::min<int64_t>(tokens - used, 1000 + static_cast<int64_t>(rng() % 4000));
    segments.push_back({text / 2, -1, doc});
    const int64_t image = std::min<int64_t>(tokens - used - text / 2, 1024);
    if (image > 0) segments.push_back({image, 0, doc});
    const int64_t rest = std::min<int64_t>(tokens - used - text / 2 - std::max<int64_t>(0, image), text - text / 2);
    if (rest > 0) segments.push_back({rest, -1, doc});
    used += text / 2 + std::max<int64_t>(0, image) + std::max<int64_t>(0, rest);
  }
  return segments;
}

BitfieldMask PackedRow(int64_t tokens) { return BuildMask(PackedSegments(tokens), MaskLayout::kPacked); }

// The same documents as rows of their own (Megatron-LM's per-sequence CP split).
std::vector<std::vector<MaskSegment>> DocumentRows(int64_t tokens) {
  std::vector<std::vector<MaskSegment>> rows;
  for (const auto& s : PackedSegments(tokens)) {
    if (rows.empty() || rows.back().back().doc != s.doc) rows.emplace_back();
    rows.back().push_back(s);
  }
  return rows;
}

void BM_BlockWork(benchmark::State& state) {
  const BitfieldMask row = PackedRow(state.range(0));
  int64_t blocks = 0;
  for (auto _ : state) {
    const auto work = BlockWork(row, 128);
    for (int64_t w : work) blocks += w;
    benchmark::DoNotOptimize(work);
  }
  const auto work = BlockWork(row, 128);
  int64_t visited = 0;
  for (int64_t w : work) visited += w;
  const double all = static_cast<double>(work.size()) * static_cast<double>(work.size());
  state.counters["kv_blocks_visited_share"] = static_cast<double>(visited) / all;
}
BENCHMARK(BM_BlockWork)->Arg(16384)->Arg(32768)->Arg(65536)->Unit(benchmark::kMillisecond);

void BM_CpImbalance(benchmark::State& state) {
  // range(2): 1 splits the packed row as one sequence, 0 each document on its own.
  const std::vector<std::vector<MaskSegment>> rows =
      state.range(2) ? std::vector<std::vector<MaskSegment>>{PackedSegments(state.range(0))}
                     : DocumentRows(state.range(0));
  const auto split = static_cast<CpSplit>(state.range(1));
  const MaskLayout layout = state.range(2) ? MaskLayout::kPacked : MaskLayout::kEmbedded;
  double imbalance = 0;
  for (auto _ : state) {
    imbalance = CpImbalance(rows, layout, 8, split, 128);
    benchmark::DoNotOptimize(imbalance);
  }
  state.counters["imbalance_cp8"] = imbalance;
}
BENCHMARK(BM_CpImbalance)
    ->Args({65536, static_cast<int>(CpSplit::kZigzag), 1})
    ->Args({65536, static_cast<int>(CpSplit::kZigzag), 0})
    ->Args({65536, static_cast<int>(CpSplit::kBalanced), 0})
    ->Unit(benchmark::kMillisecond);

// Table 3.3's four CP variants, in the model Loom has of them: a rank's
// attention kernel runs (query block, head) tiles, each a row of KV blocks,
// over the GPU's SMs (84 on an A40) in grid order, whole or in sub-blocks of
// 16 KV blocks (KernelMakespan); a variant's time is its busiest rank's makespan.
// Beside them, the simulator's estimate of the intra split's gain on the
// balanced split (SubBlockFactor, Graham's bound) against the exact one.
//   causal: zigzag blocks, rows whole; inter: LPT blocks, rows whole;
//   intra: zigzag blocks, sub-blocks; both: LPT blocks, sub-blocks (Cornstarch).
// Masks as Fig. 3.5 draws them from the thesis' synthetic sample (1024 text,
// one 1280x720 image: 1196 Qwen2-vision tokens after the 2x2 merge, one
// 2-minute audio clip: 750 Phi-4 tokens), repeated to the sequence length:
// (a) one document, every modality token first; (b) one document, the
// modality runs at random places in the text; (c) each sample its own
// document. 50 random placements per layout, means reported as speedups over
// causal (the thesis' parentheses). range(0): tokens, range(1): heads.
std::vector<MaskSegment> Figure35Segments(int64_t tokens, int layout, std::mt19937& rng) {
  std::vector<MaskSegment> out;
  int64_t used = 0;
  for (int doc = 0; used < tokens; ++doc) {
    const int d = layout == 2 ? doc : 0;
    std::vector<MaskSegment> sample{{std::min<int64_t>(1196, tokens - used), 0, d}};
    used += sample.back().tokens;
    if (used < tokens) sample.push_back({std::min<int64_t>(750, tokens - used), 1, d});
    used += used < tokens ? sample.back().tokens : 0;
    const int64_t text = std::min<int64_t>(1024, tokens - used);
    used += text;
    // Text cut at a random place around each modality run (embedded, packed), or after them (prefix).
    const int64_t cut = layout == 0 ? 0 : static_cast<int64_t>(rng() % static_cast<uint64_t>(text + 1));
    if (cut > 0) out.push_back({cut, -1, d});
    for (const auto& m : sample) out.push_back(m);
    if (text - cut > 0) out.push_back({text - cut, -1, d});
  }
  return out;
}

void BM_CpTable33(benchmark::State& state) {
  const int64_t tokens = state.range(0), heads = state.range(1);
  constexpr int kCp = 4, kSms = 84, kSubblock = 16;
  constexpr int64_t kBlock = 128;
  std::array<double, 4> total{};  // causal, inter, intra, both
  double estimate = 0;            // the simulator's SubBlockFactor on the balanced split
  for (auto _ : state) {
    total = {};
    estimate = 0;
    std::mt19937 rng(3);
    for (int layout = 0; layout < 3; ++layout) {
      for (int draw = 0; draw < 50; ++draw) {
        const auto segments = Figure35Segments(tokens, layout, rng);
        const MaskLayout how = layout == 0   ? MaskLayout::kCausalPrefix
                               : layout == 1 ? MaskLayout::kEmbedded
                                             : MaskLayout::kPacked;
        const std::vector<int64_t> work = BlockWorkOfSegments(segments, how, kBlock);
        for (int v = 0; v < 4; ++v) {
          const CpAssignment a = v % 2 == 0 ? ZigzagAssignment(work, kCp) : BalancedAssignment(work, kCp);
          double slowest = 0;
          std::vector<std::vector<int64_t>> rank_rows(kCp);
          for (size_t b = 0; b < work.size(); ++b) rank_rows[a.rank_of_block[b]].push_back(work[b]);
          for (const auto& rows : rank_rows) {
            std::vector<int64_t> tiles;  // head-major, query blocks in order: FlashAttention's grid
            for (int64_t h = 0; h < heads; ++h) tiles.insert(tiles.end(), rows.begin(), rows.end());
            slowest = std::max(slowest, KernelMakespan(tiles, kSms, v >= 2 ? kSubblock : 0));
          }
          total[v] += slowest;
          if (v == 3) estimate += SubBlockFactor(rank_rows, {heads, kSms, kSubblock});
        }
      }
    }
  }
  state.counters["inter_x"] = total[0] / total[1];
  state.counters["intra_x"] = total[0] / total[2];
  state.counters["both_x"] = total[0] / total[3];
  state.counters["both_over_inter_x"] = total[1] / total[3];  // the intra split's gain, simulated exactly
  state.counters["priced_intra_x"] = 150.0 / estimate;        // what the simulator prices it (mean of 150 masks)
}
BENCHMARK(BM_CpTable33)->ArgsProduct({{16384, 32768, 65536}, {32, 40}})->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace loom
