// fp16's loss scale policy (runtime/loss_scaler.h) against Megatron-LM's
// DynamicGradScaler.update, restated step by step: hysteresis overflows before
// the first backoff, every overflow after it backs off until a growth resets
// the tracker, growth after `growth_interval` clean steps, never below the minimum.
#include "loom/runtime/loss_scaler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "loom/runtime/unscale_gradients.h"

#include "loom/error.h"

namespace loom {
namespace {

std::vector<double> Scales(runtime::LossScaleOptions o, const std::vector<bool>& overflows) {
  runtime::LossScaler s(o);
  std::vector<double> out;
  for (bool inf : overflows) {
    out.push_back(s.scale());
    s.Update(inf);
  }
  out.push_back(s.scale());
  return out;
}

TEST(LossScaler, FollowsMegatronsDynamicGradScaler) {
  runtime::LossScaleOptions o;
  o.initial_scale = 1024;
  o.growth_interval = 3;
  o.hysteresis = 2;
  // Overflow 1 spends the hysteresis; 2 and 3 back off; 3 clean steps grow
  // (and restore the hysteresis, so the next overflow does not back off).
  EXPECT_EQ(Scales(o, {true, true, true, false, false, false, true, false}),
            (std::vector<double>{1024, 1024, 512, 256, 256, 256, 512, 512, 512}));
  // An overflow resets the growth count.
  EXPECT_EQ(Scales(o, {false, false, true, false, false, false}),
            (std::vector<double>{1024, 1024, 1024, 1024, 1024, 1024, 2048}));
  o.hysteresis = 1;
  o.min_scale = 256;
  EXPECT_EQ(Scales(o, {true, true, true, true}), (std::vector<double>{1024, 512, 256, 256, 256}));
  o.dynamic = false;  // --loss-scale: constant whatever happens
  EXPECT_EQ(Scales(o, {true, true, false, false, false}), (std::vector<double>(6, 1024)));
}

TEST(LossScaler, RefusesScalesNoRunCouldUse) {
  runtime::LossScaleOptions o;
  EXPECT_NO_THROW(o.Validate());
  for (double bad : {0.0, -1.0, 0.5, 1e39}) {
    o.initial_scale = bad;
    EXPECT_THROW(o.Validate(), Error) << bad;
  }
  o.initial_scale = 8;
  o.growth_interval = 0;
  EXPECT_THROW(o.Validate(), Error);
  o.growth_interval = 1;
  o.hysteresis = 0;
  EXPECT_THROW(o.Validate(), Error);
}

// Unscaling divides every gradient in place (a power-of-two scale exactly)
// and says whether all are finite: one inf or NaN anywhere is an overflow.
TEST(LossScaler, UnscalingDividesInPlaceAndFindsOverflows) {
  std::vector<torch::Tensor> grads = {torch::tensor({1024.0F, -3072.0F}), torch::tensor({{2.0F}, {0.5F}})};
  EXPECT_TRUE(runtime::UnscaleGradients(grads, 1024));
  EXPECT_TRUE(torch::equal(grads[0], torch::tensor({1.0F, -3.0F})));
  EXPECT_TRUE(torch::equal(grads[1], torch::tensor({{2.0F / 1024}, {0.5F / 1024}})));
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(), NAN}) {
    std::vector<torch::Tensor> g = {torch::ones({3}), torch::tensor({1.0F, bad})};
    EXPECT_FALSE(runtime::UnscaleGradients(g, 2)) << bad;
    EXPECT_EQ(g[0][0].item<float>(), 0.5F);
  }
  EXPECT_TRUE(runtime::UnscaleGradients({}, 2));
  EXPECT_TRUE(runtime::UnscaleGradients({torch::empty({0}), torch::ones({2})}, 2));  // an empty ZeRO slice
  EXPECT_FALSE(runtime::UnscaleGradients({torch::empty({0}), torch::full({1}, NAN)}, 2));
}

}  // namespace
}  // namespace loom
