// The weights a stage computes with under mixed precision
// (runtime/compute_copies.h) against plain casts: a held 16-bit weight (ZeRO-1/2)
// stands in for `p.to(bf16)` forward and backward, carries no gradient where
// the backward hands none (zero-bubble's B pass), and a backward's matmul reads
// the held weight or the step's copy instead of casting again.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "loom/runtime/compute_copies.h"

namespace loom::runtime {
namespace {

// x * 2, taking `w` as an input it hands no gradient (as the B pass defers
// the weight's to the W pass).
struct NoWeightGradient : torch::autograd::Function<NoWeightGradient> {
  static torch::Tensor forward(torch::autograd::AutogradContext*, const torch::Tensor& x, const torch::Tensor& w) {
    return x * 2;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list grads) {
    return {grads[0] * 2, torch::Tensor()};
  }
};

TEST(ComputeCopies, AHeldWeightStandsInForTheCastForwardAndBackward) {
  torch::manual_seed(0);
  const torch::Tensor x = torch::randn({5, 3}).to(torch::kBFloat16);
  const torch::Tensor p = torch::randn({4, 3}).requires_grad_(true);
  const torch::Tensor q = p.detach().clone().requires_grad_(true);  // the same weight, cast each step
  ComputeCopies held{torch::kBFloat16}, cast{torch::kBFloat16};
  held.held[p.unsafeGetTensorImpl()] = p.detach().to(torch::kBFloat16);
  const torch::Tensor w = held.Of(p);
  EXPECT_EQ(w.data_ptr(), held.held.at(p.unsafeGetTensorImpl()).data_ptr()) << "no copy of the held weight";
  EXPECT_TRUE(torch::equal(w, cast.Of(q)));
  torch::matmul(x, w.t()).to(torch::kFloat).pow(2).sum().backward();
  torch::matmul(x, cast.Of(q).t()).to(torch::kFloat).pow(2).sum().backward();
  ASSERT_TRUE(p.grad().defined());
  EXPECT_EQ(p.grad().scalar_type(), torch::kFloat);
  EXPECT_TRUE(torch::equal(p.grad(), q.grad()));
  // Under no grad the held weight itself, not a cast of p (whose storage ZeRO releases).
  torch::NoGradGuard no_grad;
  EXPECT_EQ(held.Of(p).data_ptr(), w.data_ptr());
}

TEST(ComputeCopies, AHeldWeightPassesNoGradientOnWhereTheBackwardHandsNone) {
  const torch::Tensor p = torch::randn({4, 3}).requires_grad_(true);
  ComputeCopies held{torch::kBFloat16};
  held.held[p.unsafeGetTensorImpl()] = p.detach().to(torch::kBFloat16);
  const torch::Tensor x = torch::randn({2, 3}).requires_grad_(true);
  NoWeightGradient::apply(x, held.Of(p)).sum().backward();
  EXPECT_TRUE(x.grad().defined());
  EXPECT_FALSE(p.grad().defined()) << "a weight-sized zero gradient was made and added";
}

TEST(ComputeCopies, ABackwardReadsTheHeldWeightOrTheStepsCopy) {
  const torch::Tensor p = torch::randn({4, 3}).requires_grad_(true);
  const torch::Tensor q = torch::randn({4, 3}).requires_grad_(true);
  ComputeCopies copies{torch::kBFloat16};
  copies.held[p.unsafeGetTensorImpl()] = p.detach().to(torch::kBFloat16);
  EXPECT_EQ(copies.ForBackward(p, torch::kBFloat16).data_ptr(), copies.held.at(p.unsafeGetTensorImpl()).data_ptr());
  EXPECT_THROW(copies.ForBackward(p, torch::kHalf), c10::Error) << "a held weight has no other dtype's values";
  const torch::Tensor copy = copies.Of(q);  // this step's copy
  EXPECT_EQ(copies.ForBackward(q, torch::kBFloat16).data_ptr(), copy.data_ptr());
  EXPECT_FALSE(copies.ForBackward(q, torch::kBFloat16).requires_grad());
  EXPECT_EQ(copies.ForBackward(q, torch::kFloat).data_ptr(), q.data_ptr());
  copies.copies.clear();  // the step ended: cast afresh
  EXPECT_NE(copies.ForBackward(q, torch::kBFloat16).data_ptr(), copy.data_ptr());
}

}  // namespace
}  // namespace loom::runtime
