// Attention over packed sequences (runtime/attention.h): unequal sequences,
// padded into one batch or attended one at a time, give each sequence's own
// softmax attention forward and backward, with grouped-query heads, causal or
// bidirectional, through the CPU flash kernel's operators and through
// autograd (a GPU's path); and on a CPU the backward keeps only the output and
// its log-sum-exp, as the memory model prices.
#include <gtest/gtest.h>

#include <cmath>

#include "loom/runtime/attention.h"
#include "loom/runtime/tensor_memory.h"

namespace loom {
namespace {

// Plain softmax attention of each sequence on its own (double), K/V heads
// repeated as transformers' repeat_kv: the definition SDPA computes.
torch::Tensor PerSequence(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                          const std::vector<int64_t>& lengths, bool causal) {
  const int64_t heads = q.size(2), d = q.size(3);
  const torch::Tensor K = runtime::ExpandKvHeads(k, heads), V = runtime::ExpandKvHeads(v, heads);
  std::vector<torch::Tensor> parts;
  int64_t off = 0;
  for (int64_t len : lengths) {
    auto rows = [&](const torch::Tensor& t) { return t[0].slice(0, off, off + len).transpose(0, 1); };
    torch::Tensor scores = torch::matmul(rows(q), rows(K).transpose(-2, -1)) / std::sqrt(static_cast<double>(d));
    if (causal) scores = scores.masked_fill(torch::ones({len, len}, torch::kBool).triu(1), -INFINITY);
    parts.push_back(torch::matmul(torch::softmax(scores, -1), rows(V)).transpose(0, 1));
    off += len;
  }
  return torch::cat(parts, 0).unsqueeze(0);
}

// {24, 40, 33} pads (n L^2 at most twice the work), {100, 6, 9} runs one
// sequence at a time.
const std::vector<std::vector<int64_t>> kLengths = {{24, 40, 33}, {100, 6, 9}};

TEST(Attention, UnequalSequencesAttendEachOnItsOwn) {
  torch::manual_seed(3);
  for (const auto& lengths : kLengths) {
    int64_t T = 0;
    for (int64_t l : lengths) T += l;
    for (int64_t kv_heads : {4, 2}) {
      for (bool causal : {true, false}) {
        auto make = [&](int64_t h) { return torch::randn({1, T, h, 8}, torch::kDouble).requires_grad_(true); };
        const torch::Tensor q = make(4), k = make(kv_heads), v = make(kv_heads);
        const torch::Tensor upstream = torch::randn({1, T, 4, 8}, torch::kDouble);
        auto run = [&](bool reference, runtime::AttentionBackward backward) {
          for (auto t : {q, k, v}) t.mutable_grad() = torch::Tensor();
          const torch::Tensor o =
              reference ? PerSequence(q, k, v, lengths, causal) : runtime::Attend(q, k, v, lengths, causal, backward);
          (o * upstream).sum().backward();
          return std::vector<torch::Tensor>{o.detach(), q.grad().clone(), k.grad().clone(), v.grad().clone()};
        };
        const auto want = run(true, runtime::AttentionBackward::kDevice);
        for (auto backward : {runtime::AttentionBackward::kDevice, runtime::AttentionBackward::kAutograd}) {
          const auto got = run(false, backward);
          for (size_t i = 0; i < got.size(); ++i) {
            EXPECT_TRUE(torch::allclose(got[i], want[i], 1e-10, 1e-12))
                << "lengths " << lengths[0] << ".. kv heads " << kv_heads << " causal " << causal << " backward "
                << static_cast<int>(backward) << " tensor " << i;
          }
        }
      }
    }
  }
}

// Counted exactly (runtime/tensor_memory.h): the output and the fp32
// log-sum-exp per query and head, whichever way the sequences run. Through
// autograd the padded batch's copies stay too (more than that).
TEST(Attention, UnequalSequencesKeepTheOutputAndLogSumExpOnlyOnACpu) {
  for (const auto& lengths : kLengths) {
    int64_t T = 0;
    for (int64_t l : lengths) T += l;
    for (bool causal : {true, false}) {
      const torch::Tensor q = torch::randn({1, T, 4, 16}).requires_grad_(true);
      const torch::Tensor k = torch::randn({1, T, 2, 16}).requires_grad_(true);
      const torch::Tensor v = torch::randn({1, T, 2, 16}).requires_grad_(true);
      const double priced = 4.0 * T * 4 * 16 + 4.0 * T * 4;  // output + log-sum-exp
      double kept[2];
      for (auto backward : {runtime::AttentionBackward::kDevice, runtime::AttentionBackward::kAutograd}) {
        runtime::TensorMemoryCounter counter;
        torch::Tensor o = runtime::Attend(q, k, v, lengths, causal, backward);
        kept[static_cast<int>(backward)] = static_cast<double>(counter.live_bytes());
        o.sum().backward();
      }
      EXPECT_EQ(kept[0], priced) << lengths[0] << ".. causal " << causal;
      if (lengths[0] == 24) EXPECT_GT(kept[1], 1.5 * priced) << "causal " << causal;  // the padded copies
    }
  }
}

}  // namespace
}  // namespace loom
