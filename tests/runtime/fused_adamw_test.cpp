// The runtime's AdamW (runtime/fused_adamw.h, ATen's fused kernel) against
// AdamW written out element by element in double precision (Loshchilov and
// Hutter's decoupled decay, in torch.optim.AdamW's order), and against
// libtorch's own torch::optim::AdamW, an independent implementation.
#include "loom/runtime/fused_adamw.h"

#include <gtest/gtest.h>

#include "loom/error.h"

#include <cmath>
#include <vector>

namespace loom {
namespace {

using runtime::FusedAdamW;

// One element's AdamW in double: value, moments and step count.
struct Scalar {
  double p, m = 0, v = 0;
  int t = 0;
  void Step(double g, double lr, double wd) {
    ++t;
    p *= 1 - lr * wd;
    m = FusedAdamW::kBeta1 * m + (1 - FusedAdamW::kBeta1) * g;
    v = FusedAdamW::kBeta2 * v + (1 - FusedAdamW::kBeta2) * g * g;
    const double bc1 = 1 - std::pow(FusedAdamW::kBeta1, t), bc2 = 1 - std::pow(FusedAdamW::kBeta2, t);
    p -= lr / bc1 * m / (std::sqrt(v) / std::sqrt(bc2) + FusedAdamW::kEps);
  }
};

TEST(FusedAdamW, EqualsAdamWWrittenOutElementByElement) {
  torch::manual_seed(3);
  torch::Tensor w = torch::randn({4, 3}).requires_grad_();  // decayed
  torch::Tensor b = torch::randn({5}).requires_grad_();     // not decayed
  std::vector<Scalar> ws, bs;
  for (int i = 0; i < w.numel(); ++i) ws.push_back({w.view(-1)[i].item<double>()});
  for (int i = 0; i < b.numel(); ++i) bs.push_back({b.view(-1)[i].item<double>()});
  FusedAdamW opt({{{w}, 0.1}, {{b}, 0.0}});
  const std::vector<double> lrs = {0.01, 0.05, 0.002, 0.03};
  for (size_t step = 0; step < lrs.size(); ++step) {
    const torch::Tensor gw = torch::randn({4, 3}), gb = torch::randn({5});
    w.mutable_grad() = gw.clone();
    for (int i = 0; i < w.numel(); ++i) ws[i].Step(gw.view(-1)[i].item<double>(), lrs[step], 0.1);
    if (step != 2) {  // step 2: b has no gradient, so neither its value nor its count moves
      b.mutable_grad() = gb.clone();
      for (int i = 0; i < b.numel(); ++i) bs[i].Step(gb.view(-1)[i].item<double>(), lrs[step], 0.0);
    }
    opt.Step(lrs[step]);
    opt.ZeroGrad();
    EXPECT_FALSE(w.grad().defined());
    for (int i = 0; i < w.numel(); ++i) EXPECT_NEAR(w.view(-1)[i].item<double>(), ws[i].p, 2e-6) << step;
    for (int i = 0; i < b.numel(); ++i) EXPECT_NEAR(b.view(-1)[i].item<double>(), bs[i].p, 2e-6) << step;
  }
  ASSERT_NE(opt.StateOf(w), nullptr);
  EXPECT_EQ(opt.StateOf(w)->steps, 4);
  EXPECT_EQ(opt.StateOf(b)->steps, 3);
  EXPECT_EQ(opt.StateOf(b)->step_count.item<float>(), 3.0f);
  EXPECT_NEAR(opt.StateOf(w)->exp_avg_sq.view(-1)[5].item<double>(), ws[5].v, 1e-7);
}

TEST(FusedAdamW, EqualsLibtorchsAdamWOverManyTensors) {
  torch::manual_seed(7);
  std::vector<torch::Tensor> ours, theirs;
  for (int i = 0; i < 40; ++i) {
    const torch::Tensor init = i % 3 == 0 ? torch::randn({257}) : torch::randn({i + 1, 33});
    ours.push_back(init.clone().requires_grad_());
    theirs.push_back(init.clone().requires_grad_());
  }
  FusedAdamW opt({{ours, 0.01}});
  torch::optim::AdamW reference(theirs, torch::optim::AdamWOptions(0.003).weight_decay(0.01));
  for (int step = 0; step < 5; ++step) {
    for (size_t i = 0; i < ours.size(); ++i) {
      const torch::Tensor g = torch::randn(ours[i].sizes());
      ours[i].mutable_grad() = g.clone();
      theirs[i].mutable_grad() = g.clone();
    }
    opt.Step(0.003);
    reference.step();
  }
  for (size_t i = 0; i < ours.size(); ++i) {
    EXPECT_TRUE(torch::allclose(ours[i], theirs[i], 1e-5, 1e-6)) << i;
  }
}

TEST(FusedAdamW, ARestoredStateContinuesAsIfUninterrupted) {
  torch::manual_seed(11);
  const torch::Tensor init = torch::randn({6, 2});
  std::vector<torch::Tensor> grads;
  for (int i = 0; i < 4; ++i) grads.push_back(torch::randn({6, 2}));
  torch::Tensor a = init.clone().requires_grad_();
  FusedAdamW straight({{{a}, 0.1}});
  for (const auto& g : grads) {
    a.mutable_grad() = g.clone();
    straight.Step(0.01);
  }
  // Two steps, then the state moves to a new optimizer and parameter (a
  // checkpoint's restore), then two more.
  torch::Tensor b = init.clone().requires_grad_();
  FusedAdamW first({{{b}, 0.1}});
  for (int i = 0; i < 2; ++i) {
    b.mutable_grad() = grads[i].clone();
    first.Step(0.01);
  }
  const runtime::AdamWMoments* s = first.StateOf(b);
  ASSERT_NE(s, nullptr);
  torch::Tensor c = b.detach().clone().requires_grad_();
  FusedAdamW second({{{c}, 0.1}});
  EXPECT_EQ(second.StateOf(c), nullptr);
  second.SetState(c, s->steps, s->exp_avg.view(-1), s->exp_avg_sq.view(-1));  // flat, as a checkpoint stores them
  for (int i = 2; i < 4; ++i) {
    c.mutable_grad() = grads[i].clone();
    second.Step(0.01);
  }
  EXPECT_TRUE(torch::equal(a, c));
  second.SetState(c, 0, {}, {});
  EXPECT_EQ(second.StateOf(c), nullptr);
}

// A parameter the fused kernel cannot read (not contiguous) is named before
// any state moves: the other parameters' counts stay where they were.
TEST(FusedAdamW, RefusesANonContiguousParameterBeforeAnyStateMoves) {
  torch::Tensor a = torch::randn({3, 4}).requires_grad_();
  torch::Tensor b = torch::randn({4, 3}).t().requires_grad_();  // a transposed view's layout
  a.mutable_grad() = torch::ones({3, 4});
  b.mutable_grad() = torch::ones({3, 4});
  FusedAdamW opt({{{a, b}, 0.0}});
  EXPECT_THROW(opt.Step(0.1), Error);
  EXPECT_EQ(opt.StateOf(a), nullptr);
}

}  // namespace
}  // namespace loom
