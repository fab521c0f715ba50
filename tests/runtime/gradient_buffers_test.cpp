// The contiguous gradient buffers (runtime/gradient_buffers.h) against
// autograd and torch.optim.AdamW's conventions, in one process: the backward
// accumulates into each parameter's view of its bucket's buffer, so that
// summing the buffer in place (what the data-parallel all-reduce does) sums
// every gradient; a parameter no backward reached loses its gradient, as
// after zero_grad(set_to_none=True), unless the buffer took part in a sum;
// ZeRO-2 lets its buffer go once it kept its slice; and ZeRO-1's gather fits
// in the buffer's padding.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "loom/runtime/gradient_buffers.h"
#include "loom/runtime/tensor_buckets.h"

namespace loom::runtime {
namespace {

struct TwoParams {
  torch::Tensor a = torch::tensor({1.0F, 2.0F, 3.0F}).requires_grad_(true);
  torch::Tensor b = torch::tensor({{4.0F, 5.0F}, {6.0F, 7.0F}}).requires_grad_(true);
  StageBuckets buckets{{0, {{a, b}}}};
};

TEST(GradientBuffers, BackwardsAccumulateIntoTheBucketsBuffer) {
  TwoParams p;
  GradientBuffers buffers(p.buckets);
  buffers.Bind(0);
  // Two microbatches: d/da sum(a^2) = 2a each time, d/db sum(3b) = 3.
  for (int k = 0; k < 2; ++k) ((p.a * p.a).sum() + (3 * p.b).sum()).backward();
  const torch::Tensor flat = buffers.Flat(0, 0);
  ASSERT_EQ(flat.numel(), 7);
  EXPECT_TRUE(torch::equal(flat, torch::tensor({4.0F, 8.0F, 12.0F, 6.0F, 6.0F, 6.0F, 6.0F})));
  // The all-reduce's sum, in place: the parameters' gradients read it.
  flat.mul_(2);
  EXPECT_TRUE(torch::equal(p.a.grad(), torch::tensor({8.0F, 16.0F, 24.0F})));
  EXPECT_TRUE(torch::equal(p.b.grad(), torch::full({2, 2}, 12.0F)));
  // The next step starts from zero in the same buffer.
  buffers.Bind(0);
  EXPECT_EQ(p.a.grad().data_ptr(), flat.data_ptr());
  EXPECT_EQ(p.a.grad().abs().sum().item<float>(), 0.0F);
}

TEST(GradientBuffers, AGradientReplacedOrDroppedIsCopiedBackIntoTheBuffer) {
  TwoParams p;
  GradientBuffers buffers(p.buckets);
  buffers.Bind(0);
  p.a.mutable_grad() = torch::tensor({1.0F, 1.0F, 1.0F});  // a tied copy's sum, say
  p.b.mutable_grad() = torch::Tensor();                    // an optimizer's zero_grad
  const torch::Tensor flat = buffers.Flat(0, 0);
  EXPECT_TRUE(torch::equal(flat, torch::tensor({1.0F, 1.0F, 1.0F, 0.0F, 0.0F, 0.0F, 0.0F})));
  EXPECT_EQ(p.a.grad().data_ptr(), flat.data_ptr());
  EXPECT_EQ(static_cast<const float*>(p.b.grad().data_ptr()), flat.data_ptr<float>() + 3);
}

TEST(GradientBuffers, AParameterNoBackwardReachedLosesItsGradient) {
  TwoParams p;
  GradientBuffers buffers(p.buckets);
  buffers.Bind(0);
  (p.a * 2).sum().backward();
  buffers.DropUnreached(0);
  ASSERT_TRUE(p.a.grad().defined());
  EXPECT_TRUE(torch::equal(p.a.grad(), torch::full({3}, 2.0F)));
  EXPECT_FALSE(p.b.grad().defined()) << "AdamW would step b with a zero gradient";
  // Zero-bubble's W pass adds to a gradient outside autograd: it says so.
  buffers.Bind(0);
  {
    torch::NoGradGuard no_grad;
    p.b.mutable_grad().add_(torch::ones({2, 2}));
  }
  buffers.MarkReached(p.b);
  buffers.DropUnreached(0);
  EXPECT_FALSE(p.a.grad().defined());
  ASSERT_TRUE(p.b.grad().defined());
  EXPECT_EQ(p.b.grad().sum().item<float>(), 4.0F);
}

// ZeRO-2 holds its whole gradients from its first backward to the sum only.
TEST(GradientBuffers, AReleasedBufferGoesWithItsGradientsAndComesBackAtTheNextBind) {
  TwoParams p;
  GradientBuffers buffers(p.buckets);
  EXPECT_FALSE(buffers.Bound(0));
  buffers.Bind(0);
  EXPECT_TRUE(buffers.Bound(0));
  (p.a * 3).sum().backward();
  const torch::Tensor flat = buffers.Release(0, 0);
  EXPECT_FALSE(buffers.Bound(0));
  EXPECT_FALSE(p.a.grad().defined());
  EXPECT_FALSE(p.b.grad().defined());
  EXPECT_EQ(flat.slice(0, 0, 3).sum().item<float>(), 9.0F) << "the caller's reference holds the sum";
  buffers.Bind(0);
  EXPECT_TRUE(buffers.Bound(0));
  EXPECT_NE(p.a.grad().data_ptr(), flat.data_ptr()) << "a buffer of its own";
  EXPECT_EQ(p.a.grad().abs().sum().item<float>(), 0.0F);
}

TEST(GradientBuffers, ABufferIsPaddedToHoldZeroOnesGather) {
  TwoParams p;
  GradientBuffers buffers(p.buckets, {{0, 4}});  // 7 elements over 4 members: chunks of 2
  EXPECT_FALSE(buffers.Scratch(0, 0).defined()) << "made at the first Bind";
  buffers.Bind(0);
  EXPECT_EQ(buffers.Scratch(0, 0).numel(), 8);
  EXPECT_EQ(buffers.Flat(0, 0).numel(), 7);
  EXPECT_EQ(buffers.Scratch(0, 0).data_ptr(), p.a.grad().data_ptr());
}

}  // namespace
}  // namespace loom::runtime
