// Cornstarch's mask work and CP assignment (issue 18): what pricing a CP
// stage from the batch's masks costs per sequence (BlockWork from per-block
// summaries, then zigzag or LPT over the blocks), at the thesis' 16K-64K
// tokens with N_B = 128, for a packed row of documents with images amid
// their text; and the blocked attention kernel's block-pair count against T^2.
#include <benchmark/benchmark.h>

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
      state.range(2) ? std::vector<std::vector<MaskSegment>>{PackedSegments(state.range(0))} : DocumentRows(state.range(0));
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

}  // namespace
}  // namespace loom
