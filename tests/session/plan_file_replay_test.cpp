// A plan file replayed (session/plan_file_replay.h) and reported
// (report/plan_replay_report.h): a bare plan replays batch 0 with its static
// schedule, the mean is that batch's time, and a plan made for another
// cluster is refused naming both.
#include <gtest/gtest.h>

#include "loom/data/sample_source.h"
#include "loom/plan/plan_json.h"
#include "loom/report/plan_replay_report.h"
#include "loom/session/plan_file_replay.h"
#include "loom/strategies/baselines/megatron_config.h"
#include "test_util.h"

namespace loom {
namespace {

struct TinyProblem {
  Model model = LoadModel(std::string(LOOM_TEST_DATA) + "/runtime/tiny-vlm.yaml");
  Cluster cluster = LoadCluster("h100:1x4");
  Workload workload = [this] {
    Workload w = DefaultWorkload(model);
    w.global_batch = 8;
    return w;
  }();

  // Data parallel on every GPU, one microbatch per replica.
  Plan DataParallelPlan() const {
    const Batch batch = DrawBatch(workload, 0);
    ParallelConfig cfg;
    cfg.dp = 4;
    return MegatronConfigPlan({model, cluster, workload, batch, {}}, cfg);
  }
};

TEST(PlanFileReplay, ABarePlanReplaysBatchZero) {
  const TinyProblem t;
  const std::string path = test::WriteTemp("plan_file_replay.json", PlanToJson(t.DataParallelPlan()).dump());
  const PlanFileReplay replay = ReplayPlanFile(t.model, t.cluster, t.workload, path, "");
  ASSERT_EQ(replay.batches.size(), 1u);
  EXPECT_EQ(replay.batches[0].iteration, 0);
  EXPECT_EQ(replay.batches[0].schedule, ReplayedSchedule::kPlan);
  EXPECT_EQ(replay.batches[0].recorded_iteration_time_s, 0);
  EXPECT_GT(replay.mean_iteration_time_s, 0);
  EXPECT_EQ(replay.mean_iteration_time_s, replay.batches[0].iteration_time_s);
  EXPECT_EQ(replay.first.metrics.iteration_time_s, replay.batches[0].iteration_time_s);

  const std::string text = FormatPlanFileReplay(replay, path);
  EXPECT_NE(text.find("over 1 batch(es)"), std::string::npos) << text;
  EXPECT_NE(text.find("\n  batch 0: "), std::string::npos) << text;
  EXPECT_EQ(text.find("recorded"), std::string::npos) << text;
  const nlohmann::json j = PlanFileReplayJson(replay);
  ASSERT_EQ(j["batches"].size(), 1u);
  EXPECT_FALSE(j["batches"][0].contains("recorded_iteration_time_s"));
  EXPECT_EQ(j["iteration_time_s"], replay.mean_iteration_time_s);
}

TEST(PlanFileReplay, APlanForAnotherClusterIsRefused) {
  const TinyProblem t;
  Plan plan = t.DataParallelPlan();
  plan.cluster = "elsewhere";
  test::ExpectError([&] { CheckPlanIsFor(plan, t.model, t.cluster, t.workload, "p.json"); },
                    {"p.json", "made for cluster 'elsewhere'", "--cluster elsewhere"});
}

}  // namespace
}  // namespace loom
