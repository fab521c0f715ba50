#include <gtest/gtest.h>

#include "loom/cost/memory.h"

namespace loom {
namespace {

TEST(Memory, MixedPrecisionAdamIs18BytesPerTrainableParameter) {
  EXPECT_DOUBLE_EQ(ModelState(1e9, 0, 1, 0).total(), 18e9);
  EXPECT_DOUBLE_EQ(ModelState(0, 1e9, 8, 1).total(), 2e9);  // frozen: weights only
}

TEST(Memory, ZeroStagesShardOverDataParallel) {
  EXPECT_DOUBLE_EQ(ModelState(1e9, 0, 8, 1).total(), 2e9 + 4e9 + 12e9 / 8);
  EXPECT_DOUBLE_EQ(ModelState(1e9, 0, 8, 2).total(), 2e9 + 4e9 / 8 + 12e9 / 8);
  EXPECT_DOUBLE_EQ(ModelState(1e9, 1e9, 8, 3).total(), 4e9 / 8 + 4e9 / 8 + 12e9 / 8);
}

}  // namespace
}  // namespace loom
