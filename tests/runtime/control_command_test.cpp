// The launcher's control commands as a worker reads them
// (runtime/fault_tolerance.h ParseCommand): every malformed field is an error
// naming the line and the field, where `istream >>` once left the field at
// its old value; a path keeps its spaces, leading and trailing ones too.
#include <gtest/gtest.h>

#include "loom/error.h"
#include "loom/runtime/fault_tolerance.h"
#include "test_util.h"

namespace loom {
namespace {

// (Using-declarations inside each test: the unity build shares a namespace scope between files.)
TEST(ControlCommandFields, PathsKeepTheirSpaces) {
  using runtime::ControlCommand;
  using runtime::ParseCommand;
  EXPECT_EQ(ParseCommand("go 4").path, "");
  EXPECT_EQ(ParseCommand("go 4  /a b ").path, " /a b ");
  const ControlCommand g = ParseCommand("gen 2 3 -1 5 4 -1 /tmp/g 3.json");
  EXPECT_EQ(g.kind, ControlCommand::Kind::kGeneration);
  EXPECT_EQ(g.generation, 2);
  EXPECT_EQ(g.step, 3);
  EXPECT_EQ(g.rank, -1);
  EXPECT_EQ(g.world, 5);
  EXPECT_EQ(g.nodes, 4);
  EXPECT_EQ(g.path, "/tmp/g 3.json");
  EXPECT_FALSE(g.restore);
  // A restore: the plan path's length, then the checkpoint folder after one space.
  const ControlCommand r = ParseCommand("gen 2 3 0 5 4 13 /tmp/g 3.json /ck pt/step-2 ");
  EXPECT_TRUE(r.restore);
  EXPECT_EQ(r.path, "/tmp/g 3.json");
  EXPECT_EQ(r.restore_from, "/ck pt/step-2 ");
  const ControlCommand start = ParseCommand("gen 2 3 0 5 4 13 /tmp/g 3.json");
  EXPECT_TRUE(start.restore);
  EXPECT_EQ(start.restore_from, "");
  EXPECT_EQ(ParseCommand("exit").kind, ControlCommand::Kind::kExit);
}

TEST(ControlCommandFields, EachMalformedFieldIsNamed) {
  using runtime::ParseCommand;
  test::ExpectError([] { ParseCommand("go"); }, {"control command 'go' lacks its step"});
  test::ExpectError([] { ParseCommand("go x4"); }, {"'go x4' has 'x4' where its step (an int) belongs"});
  test::ExpectError([] { ParseCommand("go 4x /p"); }, {"has '4x' where its step"});
  test::ExpectError([] { ParseCommand("gen 1 2 3 nan 5 /p"); }, {"has 'nan' where its world"});
  test::ExpectError([] { ParseCommand("gen 1 2 3 4"); }, {"lacks its nodes"});
  test::ExpectError([] { ParseCommand("gen 1 2 3 4 99999999999 /p"); }, {"where its nodes (an int) belongs"});
  test::ExpectError([] { ParseCommand("gen 1 2 3 4 5"); }, {"'gen 1 2 3 4 5' lacks its restore"});
  test::ExpectError([] { ParseCommand("gen 1 2 3 4 5 -1"); }, {"'gen 1 2 3 4 5 -1' lacks its path"});
  test::ExpectError([] { ParseCommand("gen 1 2 3 4 5 3 /p/q"); }, {"a plan path of 3 bytes, which its paths do not split at"});
  test::ExpectError([] { ParseCommand("stop 2"); }, {"lacks its path"});
  test::ExpectError([] { ParseCommand("exit now"); }, {"has fields after 'exit'"});
  test::ExpectError([] { ParseCommand(""); }, {"unknown control command ''"});
}

}  // namespace
}  // namespace loom
