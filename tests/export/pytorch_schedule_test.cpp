// PyTorch pipelining's schedule CSV both ways (issue 22): exports pass
// PyTorch's own validation rules (schedules.py `_validate_schedule`,
// re-stated in ValidatePytorchSchedule and tested against hand-made
// violations here), 1F1B's cells are its closed form, the compute_comms form
// pairs every send with its receive, and a CSV imported back simulates to the
// time of the Loom schedule it came from.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>

#include <map>
#include <set>
#include <tuple>

#include "../plan/plan_test_util.h"
#include "loom/export/pytorch_schedule.h"
#include "loom/strategies/baselines/megatron_config.h"
#include "test_util.h"

namespace loom {
namespace {

struct TextSetting {
  Model model = LoadModel("llama3-8b");
  Cluster cluster = MakeCluster("h100", 1, 8);
  Workload workload = [] {
    Workload w = LoadWorkload("text");
    w.global_batch = 16;
    return w;
  }();
};

ParallelConfig Config(int tp, int pp, int dp, int m, ScheduleKind kind, int vpp = 1) {
  ParallelConfig c;
  c.tp = tp;
  c.pp = pp;
  c.dp = dp;
  c.microbatches = m;
  c.schedule = kind;
  c.vpp = vpp;
  return c;
}

std::vector<std::string> Row(const PtSchedule& s, int rank) {
  std::vector<std::string> out;
  for (const auto& a : s[rank]) out.push_back(PtActionName(a));
  return out;
}

TEST(PytorchCsv, OneFOneBIsItsClosedFormAndPassesPytorchsRules) {
  TextSetting t;
  const PlanRun run = SimulateConfig(t.model, t.cluster, t.workload, Config(4, 2, 1, 2, ScheduleKind::kOneFOneB));
  const PytorchExport e = ExportPytorchSchedule(run.exec, false);
  ASSERT_TRUE(e.expressible) << e.notes;
  // 1F1B on 2 ranks, 2 microbatches: rank 0 warms up with both forwards, rank 1 alternates.
  EXPECT_EQ(Row(e.order, 0), (std::vector<std::string>{"0F0", "0F1", "0B0", "0B1"}));
  EXPECT_EQ(Row(e.order, 1), (std::vector<std::string>{"1F0", "1B0", "1F1", "1B1"}));
  EXPECT_EQ(FormatPytorchCsv(e.order), "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n");
  EXPECT_NO_THROW(ValidatePytorchSchedule(e.order, 2, 2, 2, "x.csv"));
  EXPECT_NE(e.notes.find("\"loop\" style"), std::string::npos) << e.notes;
}

TEST(PytorchCsv, EverySchedulesExportPassesPytorchsRulesAndImportsToTheSameTime) {
  TextSetting t;
  const std::vector<std::tuple<ScheduleKind, int, int, int>> cases = {{ScheduleKind::kGpipe, 4, 8, 1},
                                                                      {ScheduleKind::kOneFOneB, 4, 8, 1},
                                                                      {ScheduleKind::kZbH1, 4, 8, 1},
                                                                      {ScheduleKind::kInterleaved, 2, 4, 2},
                                                                      {ScheduleKind::kInterleaved, 4, 8, 2}};
  for (const auto& [kind, pp, m, vpp] : cases) {
    SCOPED_TRACE(fmt::format("{} pp {} vpp {} m {}", ScheduleKindName(kind), pp, vpp, m));
    const ParallelConfig cfg = Config(8 / pp, pp, 1, m, kind, vpp);
    const PlanRun run = SimulateConfig(t.model, t.cluster, t.workload, cfg);
    const PytorchExport e = ExportPytorchSchedule(run.exec, false);
    ASSERT_TRUE(e.expressible) << e.notes;
    ASSERT_NO_THROW(ValidatePytorchSchedule(e.order, pp, pp * vpp, m, "x.csv"));
    // ZB-H1 splits every backward into I then W; the others run full backwards.
    int i_count = 0, b_count = 0;
    for (const auto& row : e.order) {
      for (const auto& a : row) {
        i_count += a.type == PtActionType::kI;
        b_count += a.type == PtActionType::kB;
      }
    }
    EXPECT_EQ(kind == ScheduleKind::kZbH1 ? i_count : b_count, pp * vpp * m);
    // Written, read back, simulated in Loom: the same iteration.
    const std::string text = FormatPytorchCsv(e.order);
    const ImportedPytorchSchedule in = ImportPytorchSchedule(ParsePytorchCsv(text, "x.csv"), "x.csv");
    EXPECT_EQ(in.stage_rank, e.stage_rank);
    const PlanRun back = SimulatePytorchSchedule(t.model, t.cluster, t.workload, cfg, in, "x.csv");
    EXPECT_DOUBLE_EQ(back.metrics.iteration_time_s, run.metrics.iteration_time_s);
    EXPECT_DOUBLE_EQ(back.metrics.peak_mem_bytes, run.metrics.peak_mem_bytes);
  }
}

// A hand-written GPipe order (all forwards, then all backwards in reverse)
// simulates to Loom's own GPipe schedule.
TEST(PytorchCsv, AHandWrittenGpipeOrderSimulatesAsLoomsGpipe) {
  TextSetting t;
  const std::string csv = "0F0,0F1,0F2,0F3,0B3,0B2,0B1,0B0\n1F0,1F1,1F2,1F3,1B3,1B2,1B1,1B0\n";
  const ImportedPytorchSchedule in = ImportPytorchSchedule(ParsePytorchCsv(csv, "g.csv"), "g.csv");
  EXPECT_EQ(in.pp, 2);
  EXPECT_EQ(in.num_stages, 2);
  EXPECT_EQ(in.num_microbatches, 4);
  const ParallelConfig cfg = Config(4, 2, 1, 4, ScheduleKind::kGpipe);
  const PlanRun gpipe = SimulateConfig(t.model, t.cluster, t.workload, cfg);
  const PlanRun imported = SimulatePytorchSchedule(t.model, t.cluster, t.workload, cfg, in, "g.csv");
  EXPECT_DOUBLE_EQ(imported.metrics.iteration_time_s, gpipe.metrics.iteration_time_s);
}

TEST(PytorchCsv, CommsFormPairsEverySendWithItsReceive) {
  TextSetting t;
  const PlanRun run = SimulateConfig(t.model, t.cluster, t.workload, Config(4, 2, 1, 4, ScheduleKind::kInterleaved, 2));
  const PytorchExport e = ExportPytorchSchedule(run.exec, true);
  ASSERT_TRUE(e.expressible);
  // send (stage s, mb) on rank(s) <-> receive of stage s+1 (forward) or s-1 (backward) on that stage's rank,
  // and each receive comes before the compute that needs it on its rank.
  std::map<std::tuple<int, int, int>, int> sends, recvs;  // (receiving stage, mb, forward?) -> rank
  for (int r = 0; r < 2; ++r) {
    std::set<std::tuple<int, int, int>> received;
    for (const auto& a : e.order[r]) {
      const bool fwd = a.type == PtActionType::kSendF || a.type == PtActionType::kRecvF;
      if (a.type == PtActionType::kSendF || a.type == PtActionType::kSendB) {
        EXPECT_EQ(e.stage_rank[a.stage], r);
        sends[{fwd ? a.stage + 1 : a.stage - 1, a.microbatch, fwd}] = r;
      }
      if (a.type == PtActionType::kRecvF || a.type == PtActionType::kRecvB) {
        EXPECT_EQ(e.stage_rank[a.stage], r);
        recvs[{a.stage, a.microbatch, fwd}] = r;
        received.insert({a.stage, a.microbatch, fwd});
      }
      if (a.type == PtActionType::kF && a.stage > 0) {
        EXPECT_TRUE(received.count({a.stage, a.microbatch, 1})) << PtActionName(a) << " before its RECV_F";
      }
      if (a.type == PtActionType::kB && a.stage < 3) {
        EXPECT_TRUE(received.count({a.stage, a.microbatch, 0})) << PtActionName(a) << " before its RECV_B";
      }
    }
  }
  // Each stage's REDUCE_GRAD (the gradients divided by the microbatch count)
  // once, on its rank, right after its last backward: PyTorch's
  // _add_reduce_grad. Without it PyTorch's runtime leaves the gradients summed
  // over the microbatches (measured: parameters 2.9e-2 off after a step).
  for (int r = 0; r < static_cast<int>(e.order.size()); ++r) {
    const auto& row = e.order[r];
    for (size_t i = 0; i < row.size(); ++i) {
      if (row[i].type != PtActionType::kReduceGrad) continue;
      EXPECT_EQ(e.stage_rank[row[i].stage], r);
      ASSERT_GT(i, 0u);
      EXPECT_TRUE(row[i - 1].stage == row[i].stage &&
                  (row[i - 1].type == PtActionType::kB || row[i - 1].type == PtActionType::kW))
          << PtActionName(row[i - 1]);
      for (size_t k = i + 1; k < row.size(); ++k) {
        EXPECT_FALSE(row[k].stage == row[i].stage &&
                     (row[k].type == PtActionType::kB || row[k].type == PtActionType::kW ||
                      row[k].type == PtActionType::kReduceGrad))
            << PtActionName(row[k]) << " after " << PtActionName(row[i]);
      }
    }
  }
  int reduces = 0;
  for (const auto& row : e.order)
    reduces += static_cast<int>(
        std::count_if(row.begin(), row.end(), [](const PtAction& a) { return a.type == PtActionType::kReduceGrad; }));
  EXPECT_EQ(reduces, 4);
  EXPECT_NE(FormatPytorchCsv(e.order).find(",3REDUCE_GRAD,"), std::string::npos);
  EXPECT_EQ(sends.size(), 2u * 3 * 4);  // 3 boundaries between 4 stages, both directions, 4 microbatches
  EXPECT_EQ(sends.size(), recvs.size());
  for (const auto& [key, rank] : sends) EXPECT_TRUE(recvs.count(key));
  // The compute_comms file reads back to the same compute order.
  const ImportedPytorchSchedule in =
      ImportPytorchSchedule(ParsePytorchCsv(FormatPytorchCsv(e.order), "c.csv"), "c.csv");
  const ImportedPytorchSchedule compute = ImportPytorchSchedule(ExportPytorchSchedule(run.exec, false).order, "o.csv");
  EXPECT_EQ(in.rank_orders, compute.rank_orders);
}

TEST(PytorchCsv, PytorchsRulesRejectWhatPytorchRejects) {
  auto parse = [](const std::string& csv) { return ParsePytorchCsv(csv, "r.csv"); };
  test::ExpectError([&] { ValidatePytorchSchedule(parse("0F0,0B0\n0F1,0B1\n"), 2, 1, 2, "r.csv"); },
                    {"r.csv: rank 1: 0F1", "stage 0 is on both rank 0 and rank 1"});
  test::ExpectError([&] { ValidatePytorchSchedule(parse("0F0,0W0,0I0\n"), 1, 1, 1, "r.csv"); },
                    {"rank 0: 0W0", "weight gradient (W) before the input gradient (I)"});
  test::ExpectError([&] { ValidatePytorchSchedule(parse("0B0,0F0\n"), 1, 1, 1, "r.csv"); },
                    {"rank 0: 0B0", "a backward before the forward of stage 0 microbatch 0"});
  test::ExpectError([&] { ValidatePytorchSchedule(parse("0F0,0B0\n"), 1, 1, 2, "r.csv"); },
                    {"stage 0 runs 1 forwards (F) for 2 microbatches"});
  test::ExpectError([&] { ValidatePytorchSchedule(parse("0F0,0F1,0I0,0B1\n"), 1, 1, 2, "r.csv"); },
                    {"stage 0 runs 1 input gradients (I) and 0 weight gradients (W)"});
  test::ExpectError([&] { ValidatePytorchSchedule(parse("0F0,0B0\n"), 2, 1, 1, "r.csv"); },
                    {"1 rows for 2 pipeline ranks"});
  test::ExpectError([&] { parse("0F0,0X1\n"); }, {"r.csv:1:2: cell '0X1'", "F, B, I, W"});
  test::ExpectError([&] { parse("0F0\n0F\n"); }, {"r.csv:2:1: cell '0F': F needs a microbatch"});
  // A NUL or escape byte in a cell is shown, and the message goes on past it (D15: it was cut there).
  test::ExpectError(
      [&] {
        parse(
            std::string("0F0,0X\0\x1b"
                        "1\n",
                        10));
      },
      {"r.csv:1:2: cell '0X\\x00\\x1b1': expected STAGE TYPE MICROBATCH"});
  test::ExpectError([&] { ImportPytorchSchedule(parse("0F0,0B0\n\n"), "r.csv"); }, {"r.csv: rank 1 runs no stage"});
  // A mistyped stage or microbatch (9F1 for 1F1) is the cell named, not the
  // right cell after it whose forward now seems missing (third audit, X002).
  test::ExpectError([&] { ImportPytorchSchedule(parse("0F0,0F1,0B0,0B1\n9F1,1F0,1B1,1B0\n"), "r.csv"); },
                    {"r.csv:2: rank 1's action 1, 9F1: stage 9, but stage 2 never runs"});
  test::ExpectError([&] { ImportPytorchSchedule(parse("0F0,0F7,0B0,0B1\n1F0,1F1,1B1,1B0\n"), "r.csv"); },
                    {"r.csv:1: rank 0's action 2, 0F7: microbatch 7, but microbatch 2 never runs"});
  // Bubbles (empty cells), FSDP's UNSHARD / RESHARD and REDUCE_GRAD are read past.
  EXPECT_EQ(parse("0UNSHARD,0F0,,0B0,0REDUCE_GRAD,0RESHARD\n")[0].size(), 2u);
}

TEST(PytorchCsv, PlansPytorchCannotRunSayWhy) {
  test::Fixture f;
  // PipeWeaver-style sub-microbatches: the encoder stages run more microbatches than the LLM's.
  const Plan disagg = test::DisaggregatedShape(f);
  const PlanRun two_units = RunPlan(f.model, f.cluster, f.workload, disagg, f.batch);
  const PytorchExport e = ExportPytorchSchedule(two_units.exec, false);
  EXPECT_FALSE(e.expressible);
  EXPECT_NE(e.notes.find("pipelines (units or templates)"), std::string::npos) << e.notes;
}

}  // namespace
}  // namespace loom
