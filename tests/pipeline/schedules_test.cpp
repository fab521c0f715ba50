// Schedules: golden orders, validity over many shapes, and validator errors.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "loom/pipeline/schedules.h"
#include "loom/pipeline/validate.h"
#include "test_util.h"

namespace loom {
namespace {

std::string Golden(const std::string& name) {
  std::ifstream in(std::string(LOOM_TEST_DATA) + "/../pipeline/testdata/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Schedules, OneFOneBMatchesTheGoldenOrder) {
  EXPECT_EQ(ComputeOrder(MakeOneFOneB(4, 8)), Golden("one_f_one_b_4_stages_8_mb.txt"));
}

TEST(Schedules, ZbH1MatchesTheGoldenOrder) {
  EXPECT_EQ(ComputeOrder(MakeZbH1(4, 8)), Golden("zb_h1_4_stages_8_mb.txt"));
}

TEST(Schedules, EveryScheduleIsValidOnManyShapes) {
  for (int p = 1; p <= 6; ++p) {
    for (int m = 1; m <= 13; ++m) {
      SCOPED_TRACE(testing::Message() << "p=" << p << " m=" << m);
      ValidateSchedule(MakeGPipe(p, m));
      ValidateSchedule(MakeOneFOneB(p, m));
      ValidateSchedule(MakeZbH1(p, m));
      if (m % p == 0) {
        for (int v = 1; v <= 3; ++v) ValidateSchedule(MakeInterleaved(p, m, v));
      }
    }
  }
}

TEST(Schedules, PointToPointIsInsertedAroundRemoteStages) {
  Schedule s = MakeOneFOneB(2, 1);
  // rank0: F0, send-act; recv-grad, B0.  rank1: recv-act, F0, B0, send-grad.
  ASSERT_EQ(s.ranks[0].size(), 4u);
  EXPECT_EQ(s.ranks[0][1].kind, ActionKind::kSend);
  EXPECT_EQ(s.ranks[0][2].kind, ActionKind::kRecv);
  EXPECT_EQ(s.ranks[1][0].kind, ActionKind::kRecv);
  EXPECT_EQ(s.ranks[1][3].kind, ActionKind::kSend);
}

TEST(Schedules, BadRequestsAreErrors) {
  test::ExpectError([] { MakeSchedule("interleaved", 4, 6, 2); }, {"multiple of pipeline ranks (4)"});
  test::ExpectError([] { MakeSchedule("chimera", 4, 8); }, {"unknown schedule 'chimera'", "zb-h1"});
  test::ExpectError([] { MakeSchedule("1f1b", 4, 8, 2); }, {"needs the interleaved schedule"});
  test::ExpectError([] { MakeSchedule("1f1b", 0, 8); }, {">= 1"});
  test::ExpectError([] { MakeSchedule(ScheduleKind::kCustom, 4, 8); }, {"rank_orders"});
}

TEST(Schedules, KindsRoundTripByName) {
  for (ScheduleKind k : {ScheduleKind::kGpipe, ScheduleKind::kOneFOneB, ScheduleKind::kInterleaved, ScheduleKind::kZbH1,
                         ScheduleKind::kCustom}) {
    EXPECT_EQ(ParseScheduleKind(ScheduleKindName(k), "x"), k);
  }
  // Stored by value in plan files' golden tests: never renumber.
  EXPECT_EQ(static_cast<int>(ScheduleKind::kZbH1), 3);
  EXPECT_EQ(MakeSchedule(ScheduleKind::kZbH1, 4, 8).name, MakeSchedule("zb-h1", 4, 8).name);
  test::ExpectError([] { ParseScheduleKind("1F1B", "units[0].pipelines[0].schedule"); },
                    {"units[0].pipelines[0].schedule: unknown schedule '1F1B'", "custom"});
}

TEST(Validate, DeadlockNamesTheBlockedRankAndAction) {
  // Rank 1 runs microbatch 1 first while rank 0 waits for microbatch 0's gradient
  // before it sends microbatch 1: a cyclic wait.
  Schedule s = MakeGPipe(2, 2);
  Schedule bad = s;
  bad.ranks[0].clear();
  bad.ranks[1].clear();
  auto F = [](int st, int mb) { return Action{ActionKind::kForward, st, mb}; };
  auto B = [](int st, int mb) { return Action{ActionKind::kBackward, st, mb}; };
  bad.ranks[0] = {F(0, 0), B(0, 0), F(0, 1), B(0, 1)};
  bad.ranks[1] = {F(1, 1), B(1, 1), F(1, 0), B(1, 0)};
  AddPointToPoint(bad);
  test::ExpectError([&] { ValidateSchedule(bad); }, {"deadlocks", "rank 0", "waits for", "rank 1"});
}

TEST(Validate, MissingOrMisplacedActionsAreNamed) {
  Schedule s = MakeOneFOneB(2, 2);
  Schedule no_recv = s;
  for (auto it = no_recv.ranks[1].begin(); it != no_recv.ranks[1].end(); ++it) {
    if (it->kind == ActionKind::kRecv) {
      no_recv.ranks[1].erase(it);
      break;
    }
  }
  test::ExpectError([&] { ValidateSchedule(no_recv); }, {"rank 1", "no receive of its input activation"});
  Schedule early = MakeGPipe(1, 2);
  std::swap(early.ranks[0][0], early.ranks[0][3]);  // B1 first
  test::ExpectError([&] { ValidateSchedule(early); }, {"rank 0 action 0 (B1@0)", "before its forward"});
  Schedule dup = MakeGPipe(1, 1);
  dup.ranks[0].push_back(dup.ranks[0][0]);
  test::ExpectError([&] { ValidateSchedule(dup); }, {"duplicate"});
  // A send nobody receives (its consumer stage is on the same rank and runs without it).
  Schedule stray = MakeInterleaved(1, 2, 2);
  Action send;
  send.kind = ActionKind::kSend;
  send.stage = 0;
  send.microbatch = 1;
  send.peer = 0;
  stray.ranks[0].insert(stray.ranks[0].begin() + 2, send);
  test::ExpectError([&] { ValidateSchedule(stray); },
                    {"rank 0 never receives the activation of microbatch 1", "stage 0 sends it"});
}

// NCCL pairs messages between two ranks by order: every built-in schedule's
// sends and receives between each pair come in the same order, and a schedule
// with two receives swapped is caught, naming both messages.
TEST(Schedules, EveryPairSendsAndReceivesInOneOrder) {
  for (const char* name : {"gpipe", "1f1b", "zb-h1"}) {
    for (int ranks : {2, 4}) {
      for (int microbatches : {ranks, 2 * ranks + 1}) {
        EXPECT_EQ(MessageOrderMismatch(MakeSchedule(name, ranks, microbatches)), "") << name << " " << ranks;
      }
    }
  }
  for (int ranks : {2, 4}) {
    EXPECT_EQ(MessageOrderMismatch(MakeSchedule("interleaved", ranks, 2 * ranks, 2)), "") << ranks;
  }
  Schedule s = MakeSchedule("1f1b", 2, 4);
  std::vector<size_t> recvs;
  for (size_t i = 0; i < s.ranks[1].size(); ++i) {
    if (s.ranks[1][i].kind == ActionKind::kRecv) recvs.push_back(i);
  }
  ASSERT_GE(recvs.size(), 2u);
  std::swap(s.ranks[1][recvs[0]], s.ranks[1][recvs[1]]);
  const std::string why = MessageOrderMismatch(s);
  EXPECT_NE(why.find("rank 0 sends"), std::string::npos) << why;
  EXPECT_NE(why.find("to rank 1"), std::string::npos) << why;
}

}  // namespace
}  // namespace loom
