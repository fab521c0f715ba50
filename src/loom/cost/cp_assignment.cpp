#include "loom/cost/cp_assignment.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <queue>

#include "loom/algo/lpt.h"
#include "loom/error.h"

namespace loom {

namespace {

std::vector<double> Sizes(const std::vector<int64_t>& work, int cp) {
  if (cp < 1) throw Error(fmt::format("context parallelism {}: valid: >= 1", cp));
  std::vector<double> out;
  for (size_t b = 0; b < work.size(); ++b) {
    if (work[b] < 0) throw Error(fmt::format("block {} has work {}; valid: >= 0", b, work[b]));
    out.push_back(static_cast<double>(work[b]));
  }
  return out;
}

CpAssignment Finish(const std::vector<double>& sizes, std::vector<int> rank_of_block, int cp) {
  CpAssignment a;
  a.rank_work = BinLoads(sizes, rank_of_block, cp);
  a.rank_of_block = std::move(rank_of_block);
  return a;
}

}  // namespace

double CpAssignment::max_work() const {
  return rank_work.empty() ? 0 : *std::max_element(rank_work.begin(), rank_work.end());
}

double CpAssignment::imbalance() const {
  const double total = std::accumulate(rank_work.begin(), rank_work.end(), 0.0);
  return total > 0 ? max_work() * static_cast<double>(rank_work.size()) / total : 1.0;
}

CpAssignment ZigzagAssignment(const std::vector<int64_t>& block_work, int cp) {
  const std::vector<double> sizes = Sizes(block_work, cp);
  const int64_t blocks = static_cast<int64_t>(sizes.size()), chunks = 2 * cp;
  std::vector<int> rank(blocks, 0);
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t chunk = b * chunks / std::max<int64_t>(1, blocks);  // chunks as even as blocks allow
    rank[b] = static_cast<int>(chunk < cp ? chunk : chunks - 1 - chunk);
  }
  return Finish(sizes, std::move(rank), cp);
}

CpAssignment BalancedAssignment(const std::vector<int64_t>& block_work, int cp) {
  const std::vector<double> sizes = Sizes(block_work, cp);
  return Finish(sizes, LptPartition(sizes, cp), cp);
}

const char* CpSplitName(CpSplit s) {
  switch (s) {
    case CpSplit::kIdeal:
      return "ideal";
    case CpSplit::kZigzag:
      return "zigzag";
    case CpSplit::kBalanced:
      return "balanced";
  }
  return "ideal";
}

CpSplit ParseCpSplit(const std::string& name, const std::string& field) {
  for (CpSplit s : {CpSplit::kIdeal, CpSplit::kZigzag, CpSplit::kBalanced}) {
    if (name == CpSplitName(s)) return s;
  }
  throw Error(fmt::format("{}: '{}'; valid: ideal, zigzag, balanced", field, name));
}

double CpImbalance(const std::vector<std::vector<MaskSegment>>& rows, MaskLayout layout, int cp, CpSplit split,
                   int64_t block_tokens, const KernelShape* kernel) {
  if (split == CpSplit::kIdeal || cp <= 1) return 1.0;
  std::vector<double> work(cp, 0.0);
  std::vector<int64_t> all;  // balanced: every row's blocks, assigned together
  for (const auto& row : rows) {
    if (split == CpSplit::kBalanced) {
      const auto blocks = BlockWorkOfSegments(row, layout, block_tokens);
      all.insert(all.end(), blocks.begin(), blocks.end());
      continue;
    }
    // Zigzag cuts tokens, not blocks (Megatron-LM's, and the runtime's
    // ContextRows: 2 cp chunks with bounds floor(i L / 2cp)), and its ring
    // attention computes the pairs of each chunk: a rank's work is its tokens'
    // keys. Blocks would misprice documents of a few blocks.
    int64_t L = 0;
    for (const auto& s : row) L += s.tokens;
    const int64_t chunks = 2 * static_cast<int64_t>(cp);
    std::vector<int64_t> bounds;
    for (int64_t c = 0; c <= chunks; ++c) bounds.push_back(c * L / chunks);
    const std::vector<double> keys = KeysInRanges(row, layout, bounds);
    for (int64_t c = 0; c < chunks; ++c) work[c < cp ? c : chunks - 1 - c] += keys[c];
  }
  double intra = 1.0;
  if (split == CpSplit::kBalanced) {
    const CpAssignment a = BalancedAssignment(all, cp);
    work = a.rank_work;
    if (kernel != nullptr) {
      std::vector<std::vector<int64_t>> rank_rows(cp);
      for (size_t b = 0; b < all.size(); ++b) rank_rows[a.rank_of_block[b]].push_back(all[b]);
      intra = SubBlockFactor(rank_rows, *kernel);
    }
  }
  const double total = std::accumulate(work.begin(), work.end(), 0.0);
  return total > 0 ? *std::max_element(work.begin(), work.end()) * cp / total * intra : 1.0;
}

double KernelMakespan(const std::vector<int64_t>& rows, int units, int subblock) {
  if (units < 1 || subblock < 0) {
    throw Error(fmt::format("kernel of {} compute units, sub-blocks of {}; valid: units >= 1, sub-blocks >= 0", units,
                            subblock));
  }
  // Units by the time they free up; each piece goes to the earliest.
  std::priority_queue<double, std::vector<double>, std::greater<double>> free_at;
  for (int u = 0; u < units; ++u) free_at.push(0);
  double end = 0;
  auto start = [&](double steps) {
    const double finish = free_at.top() + steps;
    free_at.pop();
    free_at.push(finish);
    end = std::max(end, finish);
  };
  for (int64_t r : rows) {
    if (r < 0) throw Error(fmt::format("a row of {} KV blocks; valid: >= 0", r));
    if (subblock == 0) {
      start(static_cast<double>(r));
      continue;
    }
    for (int64_t left = r; left > 0; left -= subblock) start(static_cast<double>(std::min<int64_t>(left, subblock)));
  }
  return end;
}

double SubBlockFactor(const std::vector<std::vector<int64_t>>& rank_rows, const KernelShape& kernel) {
  if (kernel.heads < 1 || kernel.units < 1 || kernel.subblock < 1) {
    throw Error(fmt::format("kernel of {} heads on {} units, sub-blocks of {}; valid: each >= 1", kernel.heads,
                            kernel.units, kernel.subblock));
  }
  double whole = 0, split = 0;
  const double units = kernel.units, tail = 1 - 1 / units;
  for (const auto& rows : rank_rows) {
    double work = 0;
    int64_t longest = 0;
    for (int64_t r : rows) {
      work += static_cast<double>(r);
      longest = std::max(longest, r);
    }
    const double spread = work * static_cast<double>(kernel.heads) / units;
    whole = std::max(whole, spread + static_cast<double>(longest) * tail);
    split = std::max(split, spread + static_cast<double>(std::min<int64_t>(longest, kernel.subblock)) * tail);
  }
  return whole > 0 ? split / whole : 1.0;
}

}  // namespace loom
