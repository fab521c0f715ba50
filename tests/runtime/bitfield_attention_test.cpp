// Bitfield-masked attention (runtime/bitfield_attention.h): the blocked path,
// which never builds the T x T mask, equals the dense reference forward and
// backward on random masks of all three layouts (Cornstarch §3.4.2), and
// skips work: on a causal mask it visits half the blocks (plus the diagonal).
#include <gtest/gtest.h>

#include <random>

#include "data/random_masks.h"
#include "loom/error.h"
#include "loom/runtime/bitfield_attention.h"
#include "loom/runtime/context_parallel.h"
#include "loom/runtime/tensor_memory.h"
#include "reference.h"

namespace loom {
namespace {

TEST(BitfieldAttention, BlockedEqualsDenseForwardAndBackward) {
  std::mt19937 rng(5);
  torch::manual_seed(5);
  for (int trial = 0; trial < 12; ++trial) {
    for (MaskLayout layout : {MaskLayout::kCausalPrefix, MaskLayout::kEmbedded, MaskLayout::kPacked}) {
      const BitfieldMask mask = BuildMask(test::RandomSegments(rng, 4, 24), layout);
      // Grouped-query heads on odd trials: the blocked path takes them as
      // they are, the reference reads them repeated (transformers' repeat_kv).
      const int64_t T = static_cast<int64_t>(mask.size()), heads = 2, kv_heads = trial % 2 == 0 ? 2 : 1, d = 8;
      auto make = [&](int64_t h) { return torch::randn({1, T, h, d}, torch::kDouble).requires_grad_(true); };
      const torch::Tensor q = make(heads), k = make(kv_heads), v = make(kv_heads);
      const torch::Tensor upstream = torch::randn({1, T, heads, d}, torch::kDouble);
      auto run = [&](bool blocked, int64_t block, runtime::AttentionBackward backward) {
        for (auto t : {q, k, v}) t.mutable_grad() = torch::Tensor();
        torch::Tensor o = blocked ? runtime::BitfieldAttention(q, k, v, mask, block, nullptr, backward)
                                  : runtime::BitfieldAttentionReference(q, runtime::ExpandKvHeads(k, heads),
                                                                        runtime::ExpandKvHeads(v, heads), mask);
        (o * upstream).sum().backward();
        return std::vector<torch::Tensor>{o.detach(), q.grad().clone(), k.grad().clone(), v.grad().clone()};
      };
      const auto want = run(false, 0, runtime::AttentionBackward::kDevice);
      for (auto backward : {runtime::AttentionBackward::kDevice, runtime::AttentionBackward::kAutograd}) {
        for (int64_t block : {1, 5, 16}) {
          const auto got = run(true, block, backward);
          for (size_t i = 0; i < got.size(); ++i) {
            EXPECT_TRUE(torch::allclose(got[i], want[i], 1e-10, 1e-12))
                << "trial " << trial << " layout " << static_cast<int>(layout) << " block " << block << " backward "
                << static_cast<int>(backward) << " tensor " << i;
          }
        }
      }
    }
  }
}

// What the blocked path keeps for its backward, counted exactly: on a CPU its
// output and the fp32 log-sum-exp per query and head, nothing of its windows
// (their gathered K/V and masks), as cost/layer_work.h ActivationBytes prices
// attention (the inputs q, k, v are the projections' outputs, counted there).
// Through autograd (a GPU's path) the output only: the backward recomputes.
TEST(BitfieldAttention, KeepsItsOutputAndLogSumExpOnly) {
  std::mt19937 rng(9);
  const BitfieldMask mask = BuildMask(test::RandomSegments(rng, 6, 40), MaskLayout::kEmbedded);
  const int64_t T = static_cast<int64_t>(mask.size()), heads = 4, kv_heads = 2, d = 16;
  const torch::Tensor q = torch::randn({1, T, heads, d}).requires_grad_(true);
  const torch::Tensor k = torch::randn({1, T, kv_heads, d}).requires_grad_(true), v = torch::randn_like(k);
  v.requires_grad_(true);
  for (auto backward : {runtime::AttentionBackward::kDevice, runtime::AttentionBackward::kAutograd}) {
    runtime::TensorMemoryCounter counter;
    torch::Tensor o = runtime::BitfieldAttention(q, k, v, mask, 8, nullptr, backward);
    const double out_bytes = 4.0 * T * heads * d, lse_bytes = 4.0 * T * heads;
    EXPECT_EQ(static_cast<double>(counter.live_bytes()),
              out_bytes + (backward == runtime::AttentionBackward::kDevice ? lse_bytes : 0))
        << static_cast<int>(backward);
    o.sum().backward();
  }
}

// A CP rank's queries over the whole K/V (runtime/context_parallel.h's
// all-gather attention): any ascending subset of rows gives the reference's
// rows, and the gradients the reference's upstream restricted to them gives.
TEST(BitfieldAttention, SomeRowsOverAllKeysEqualTheReferencesRows) {
  std::mt19937 rng(11);
  torch::manual_seed(11);
  for (int trial = 0; trial < 8; ++trial) {
    for (MaskLayout layout : {MaskLayout::kCausalPrefix, MaskLayout::kEmbedded, MaskLayout::kPacked}) {
      const BitfieldMask mask = BuildMask(test::RandomSegments(rng, 4, 24), layout);
      const int64_t T = static_cast<int64_t>(mask.size()), heads = 2, d = 4;
      std::vector<int64_t> rows;
      for (int64_t i = 0; i < T; ++i) {
        if (rng() % 3 == 0) rows.push_back(i);
      }
      const torch::Tensor index = torch::tensor(rows, torch::kLong);
      auto make = [&] { return torch::randn({1, T, heads, d}, torch::kDouble).requires_grad_(true); };
      const torch::Tensor q = make(), k = make(), v = make();
      const torch::Tensor upstream = torch::randn({1, static_cast<int64_t>(rows.size()), heads, d}, torch::kDouble);
      auto grads = [&](const torch::Tensor& o) {
        for (auto t : {q, k, v}) t.mutable_grad() = torch::Tensor();
        (o * upstream).sum().backward();
        return std::vector<torch::Tensor>{o.detach(), q.grad().clone(), k.grad().clone(), v.grad().clone()};
      };
      const auto want = grads(runtime::BitfieldAttentionReference(q, k, v, mask).index_select(1, index));
      for (int64_t block : {1, 4, 7}) {
        const auto got = grads(runtime::BitfieldAttentionRows(q.index_select(1, index), k, v, mask, rows, block));
        for (size_t i = 0; i < got.size(); ++i) {
          EXPECT_TRUE(torch::allclose(got[i], want[i], 1e-10, 1e-12))
              << "trial " << trial << " layout " << static_cast<int>(layout) << " block " << block << " tensor " << i;
        }
      }
    }
  }
  const BitfieldMask mask = BuildMask({{8, -1, 0}}, MaskLayout::kEmbedded);
  const torch::Tensor all = torch::randn({1, 8, 1, 4}), two = torch::randn({1, 2, 1, 4});
  EXPECT_THROW(runtime::BitfieldAttentionRows(two, all, all, mask, {3, 2}, 4), Error);  // not ascending
  EXPECT_THROW(runtime::BitfieldAttentionRows(two, all, all, mask, {3, 8}, 4), Error);  // past the mask
  EXPECT_THROW(runtime::BitfieldAttentionRows(two, all, all, mask, {3}, 4), Error);     // 2 queries, 1 row
}

TEST(BitfieldAttention, CausalMaskVisitsTheLowerTriangleOfBlocks) {
  const BitfieldMask mask = BuildMask({{64, -1, 0}}, MaskLayout::kEmbedded);
  int64_t visited = 0;
  for (const auto& row : KvBlocks(mask, 8)) visited += static_cast<int64_t>(row.size());
  EXPECT_EQ(visited, 8 * 9 / 2);  // of 64 block pairs
  const torch::Tensor q = torch::randn({1, 63, 1, 4});
  EXPECT_THROW(runtime::BitfieldAttention(q, q, q, mask, 8), Error);  // 63 tokens for a 64-token mask
  EXPECT_THROW(runtime::BitfieldAttention(torch::randn({1, 64, 1, 4}), q, q, mask, 0), Error);
  // KV-block rows computed once for every layer must be the mask's at that block size.
  const torch::Tensor x = torch::randn({1, 64, 1, 4});
  const auto rows = KvBlocks(mask, 8);
  EXPECT_TRUE(torch::allclose(runtime::BitfieldAttention(x, x, x, mask, 8, &rows),
                              runtime::BitfieldAttention(x, x, x, mask, 8)));
  EXPECT_THROW(runtime::BitfieldAttention(x, x, x, mask, 16, &rows), Error);
}

// tiny-vlm with `attention_mask: bitfield` on its LLM: the runtime's layers
// take the mask built from each microbatch's packing (image tokens modality 0,
// each packed document apart) and train like one process under pipelines,
// replicas and recomputation; the mask changes what the model computes (its
// losses differ from tiny-vlm's).
TEST(BitfieldAttention, TheRuntimesLayersTrainWithItLikeOneProcess) {
  using namespace runtime_test;
  const std::string model = std::string(LOOM_TEST_DATA) + "/runtime/tiny-vlm-bitfield.yaml";
  const TinyRun s(model, kLaion);
  EXPECT_TRUE(s.model.modules[s.model.FindModule("llm")].bitfield_attention);
  const Reference bitfield = TrainInOneProcess(s), plain = TrainInOneProcess(TinyRun(kVlm, kLaion));
  EXPECT_GT(std::abs(bitfield.losses[1] - plain.losses[1]), 1e-4);
  ExpectRunsLikeTheReference(s, {{"bitfield-1f1b", ScheduleKind::kOneFOneB, 1, 2, 1},
                                 {"bitfield-dp2-full", ScheduleKind::kGpipe, 1, 2, 2, Recompute::kFull}});
}

// Context parallelism over the bitfield-masked LLM (Cornstarch §3.3.2): every
// rank attends its rows over all-gathered K/V under the packed row's mask;
// CP 2 and 4 with Cornstarch's balanced split (LPT over 128-token blocks) and
// CP 2 with Megatron's zigzag rows, the last with selective recomputation
// (the attention core, and so the all-gather, runs again in the backward),
// each end with the single-process reference's losses and parameters. The
// samples are interleaved documents of up to 384 tokens, so the balanced
// split cuts documents into blocks on several ranks, as zigzag does.
TEST(BitfieldAttention, ContextParallelRanksTrainLikeOneProcess) {
  using namespace runtime_test;
  const std::string model = std::string(LOOM_TEST_DATA) + "/runtime/tiny-vlm-bitfield.yaml";
  const TinyRun s(model, std::string(LOOM_TEST_DATA) + "/runtime/tiny-obelics.yaml");
  const Batch batch = DrawBatch(s.workload, 0);
  int64_t longest_text = 0;
  for (const Sample& x : batch.samples) {
    for (int64_t t : x.doc_text_tokens) longest_text = std::max(longest_text, t);
  }
  EXPECT_GT(longest_text, 2 * runtime::kCpBlockTokens);
  const Reference want = TrainInOneProcess(s);
  struct CpCase {
    int cp;
    CpSplit split;
    Recompute recompute;
  };
  for (const CpCase& c :
       {CpCase{2, CpSplit::kBalanced, Recompute::kNone}, CpCase{4, CpSplit::kBalanced, Recompute::kNone},
        CpCase{2, CpSplit::kZigzag, Recompute::kSelective}}) {
    SCOPED_TRACE(fmt::format("cp {} {}", c.cp, CpSplitName(c.split)));
    const std::string cluster = fmt::format("h100:1x{}", c.cp);
    const Cluster cl = LoadCluster(cluster);
    const std::string plan = MegatronPlanFile(s, ScheduleKind::kOneFOneB, 1,
                                              fmt::format("bitfield-cp{}-{}.json", c.cp, CpSplitName(c.split)), 1, 1, 1,
                                              &cl, c.recompute, 1, c.cp, c.split);
    ExpectRunMatches(want, "run --model " + model + " --cluster " + cluster + " " + s.data_args + " --plan " + plan);
  }
}

}  // namespace
}  // namespace loom
