// Bitfield-masked attention (runtime/bitfield_attention.h): the blocked path,
// which never builds the T x T mask, equals the dense reference forward and
// backward on random masks of all three layouts (Cornstarch §3.4.2), and
// skips work: on a causal mask it visits half the blocks (plus the diagonal).
#include <gtest/gtest.h>

#include <random>

#include "loom/error.h"
#include "data/random_masks.h"
#include "loom/runtime/bitfield_attention.h"
#include "reference.h"

namespace loom {
namespace {


TEST(BitfieldAttention, BlockedEqualsDenseForwardAndBackward) {
  std::mt19937 rng(5);
  torch::manual_seed(5);
  for (int trial = 0; trial < 12; ++trial) {
    for (MaskLayout layout : {MaskLayout::kCausalPrefix, MaskLayout::kEmbedded, MaskLayout::kPacked}) {
      const BitfieldMask mask = BuildMask(test::RandomSegments(rng, 4, 24), layout);
      const int64_t T = static_cast<int64_t>(mask.size()), heads = 2, d = 8;
      auto make = [&] { return torch::randn({1, T, heads, d}, torch::kDouble).requires_grad_(true); };
      const torch::Tensor q = make(), k = make(), v = make();
      const torch::Tensor upstream = torch::randn({1, T, heads, d}, torch::kDouble);
      auto run = [&](bool blocked, int64_t block) {
        for (auto t : {q, k, v}) t.mutable_grad() = torch::Tensor();
        torch::Tensor o = blocked ? runtime::BitfieldAttention(q, k, v, mask, block)
                                  : runtime::BitfieldAttentionReference(q, k, v, mask);
        (o * upstream).sum().backward();
        return std::vector<torch::Tensor>{o.detach(), q.grad().clone(), k.grad().clone(), v.grad().clone()};
      };
      const auto want = run(false, 0);
      for (int64_t block : {1, 5, 16}) {
        const auto got = run(true, block);
        for (size_t i = 0; i < got.size(); ++i) {
          EXPECT_TRUE(torch::allclose(got[i], want[i], 1e-10, 1e-12))
              << "trial " << trial << " layout " << static_cast<int>(layout) << " block " << block << " tensor " << i;
        }
      }
    }
  }
}

TEST(BitfieldAttention, CausalMaskVisitsTheLowerTriangleOfBlocks) {
  const BitfieldMask mask = BuildMask({{64, -1, 0}}, MaskLayout::kEmbedded);
  int64_t visited = 0;
  for (const auto& row : KvBlocks(mask, 8)) visited += static_cast<int64_t>(row.size());
  EXPECT_EQ(visited, 8 * 9 / 2);  // of 64 block pairs
  const torch::Tensor q = torch::randn({1, 63, 1, 4});
  EXPECT_THROW(runtime::BitfieldAttention(q, q, q, mask, 8), Error);  // 63 tokens for a 64-token mask
  EXPECT_THROW(runtime::BitfieldAttention(torch::randn({1, 64, 1, 4}), q, q, mask, 0), Error);
}

// tiny-vlm with `attention_mask: bitfield` on its LLM: the runtime's layers
// take the mask built from each microbatch's packing (image tokens modality 0,
// each packed document apart) and train like one process under pipelines,
// replicas and recomputation; the mask changes what the model computes (its
// losses differ from tiny-vlm's). Context parallelism over it is refused.
TEST(BitfieldAttention, TheRuntimesLayersTrainWithItLikeOneProcess) {
  using namespace runtime_test;
  const std::string model = std::string(LOOM_TEST_DATA) + "/runtime/tiny-vlm-bitfield.yaml";
  const TinyRun s(model, kLaion);
  EXPECT_TRUE(s.model.modules[s.model.FindModule("llm")].bitfield_attention);
  const Reference bitfield = TrainInOneProcess(s), plain = TrainInOneProcess(TinyRun(kVlm, kLaion));
  EXPECT_GT(std::abs(bitfield.losses[1] - plain.losses[1]), 1e-4);
  ExpectRunsLikeTheReference(s, {{"bitfield-1f1b", ScheduleKind::kOneFOneB, 1, 2, 1},
                                 {"bitfield-dp2-full", ScheduleKind::kGpipe, 1, 2, 2, Recompute::kFull}});
  const Cluster two = MakeCluster("h100", 1, 2);
  const std::string plan = MegatronPlanFile(s, ScheduleKind::kOneFOneB, 1, "bitfield-cp2.json", 1, 1, 1, &two,
                                            Recompute::kNone, 1, 2);
  auto [code, out] = LoomCli("run --model " + model + " --cluster h100:1x2 " + s.data_args + " --plan " + plan +
                             " --steps 1 --timeout 20");
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("bitfield attention under context parallelism"), std::string::npos) << out;
}

}  // namespace
}  // namespace loom
