// The strategy lists `loom plan --strategy` and the Python module's
// `plan(strategies=...)` both read (session/strategy_list.h): "all" is the
// registry's report order, a list keeps its order, and an empty list, an
// unknown or empty name and a repeated name are errors naming the flag given.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "loom/session/strategy_list.h"
#include "loom/strategies/strategy.h"
#include "test_util.h"

namespace loom {
namespace {

TEST(StrategyList, AllIsTheRegistrysReportOrder) { EXPECT_EQ(ParseStrategyList("all"), StrategyNames()); }

TEST(StrategyList, AListKeepsItsOrderAndMayNameVariants) {
  EXPECT_EQ(ParseStrategyList("mmscale,megatron"), (std::vector<std::string>{"mmscale", "megatron"}));
  // Variants run only when named, so a list may name them.
  EXPECT_EQ(ParseStrategyList("mmscale-ratio"), std::vector<std::string>{"mmscale-ratio"});
}

TEST(StrategyList, BadListsAreErrorsNamingTheFlag) {
  test::ExpectError([] { ParseStrategyList(""); }, {"--strategy: empty; valid: NAME[,NAME...] of megatron"});
  test::ExpectError([] { ParseStrategyList("megatron,nope"); },
                    {"--strategy: unknown strategy 'nope'; valid: megatron, fsdp"});
  test::ExpectError([] { ParseStrategyList("megatron,"); }, {"--strategy: unknown strategy ''"});
  test::ExpectError([] { ParseStrategyList("megatron,mmscale,megatron"); }, {"--strategy: megatron is named twice"});
  // The Python module names its argument instead.
  test::ExpectError([] { ParseStrategyList("megatron,megatron", "strategies"); },
                    {"strategies: megatron is named twice"});
}

}  // namespace
}  // namespace loom
