// "Did you mean ...?" (did_you_mean.h) on the names people mistype: a wrong
// case, a letter dropped, added, changed or two swapped, a prefix of one name;
// nothing suggested where no name is close. Then the loaders that use it.
#include "loom/did_you_mean.h"

#include <gtest/gtest.h>

#include "loom/session/strategy_list.h"
#include "loom/spec/model.h"
#include "loom/spec/workload.h"
#include "loom/strategies/strategy.h"
#include "test_util.h"

namespace loom {
namespace {

TEST(DidYouMean, SuggestsTheClosestNameOnly) {
  const std::vector<std::string> gpus = {"a40", "a800", "h800", "h100", "h200", "b200", "gb200"};
  EXPECT_EQ(ClosestName("H100", gpus), "h100");   // case
  EXPECT_EQ(ClosestName("h1000", gpus), "h100");  // one added
  EXPECT_EQ(ClosestName("gb20", gpus), "gb200");  // one dropped
  EXPECT_EQ(ClosestName("xyz", gpus), "");        // nothing close
  const std::vector<std::string> names = {"pipeweaver", "megatron", "mosaic", "llama3-8b", "llama3-70b"};
  EXPECT_EQ(ClosestName("pipewaever", names), "pipeweaver");  // two swapped
  EXPECT_EQ(ClosestName("megatorn", names), "megatron");
  EXPECT_EQ(ClosestName("llama3-8", names), "llama3-8b");
  EXPECT_EQ(ClosestName("llama3", names), "");  // a prefix of two: no guess
  EXPECT_EQ(ClosestName("", names), "");
  EXPECT_EQ(DidYouMean("mosaik", names), "; did you mean 'mosaic'?");
  EXPECT_EQ(DidYouMean("fsdp", names), "");
}

TEST(DidYouMean, LoadersSuggestAName) {
  test::ExpectError([] { LoadModel("llama3-8"); }, {"unknown model 'llama3-8'", "did you mean 'llama3-8b'?"});
  test::ExpectError([] { LoadWorkload("laoin"); }, {"unknown workload 'laoin'", "did you mean 'laion'?"});
  test::ExpectError([] { ParseStrategyList("megatron,pipeweavr"); },
                    {"unknown strategy 'pipeweavr'", "did you mean 'pipeweaver'?"});
}

}  // namespace
}  // namespace loom
