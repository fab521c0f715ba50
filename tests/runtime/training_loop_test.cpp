// The training loop around the steps (issue 42): the learning-rate schedules
// against their closed forms, the options no run can use, a diverged run
// stopped at the step that diverged (or its steps skipped when asked), and
// the metrics file and run report. The loop's numbers against transformers
// and torch.optim (schedule, decay, clipping under every layout) are
// HfParity.TrainingLoopEqualsTransformersUnderEveryLayout; the global norm
// under every strategy's plan, tests/runtime/reference.h.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numbers>
#include <sstream>
#include <string>

#include "loom/runtime/training_options.h"
#include "test_util.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using runtime::LrSchedule;
using runtime::TrainingOptions;

// A file in the tests' temporary folder, named for this process.
std::string TempPath(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / "loom_tests";
  fs::create_directories(dir);
  return (dir / (std::to_string(::getpid()) + "_" + name)).string();
}

const std::string kTinyLlm = "run --model " + std::string(LOOM_TEST_DATA) +
                             "/runtime/tiny-llm.yaml --cluster h100:1x1 --workload text --global-batch 8 "
                             "--seq-len 32 --precision fp32 --timeout 30 ";

TEST(TrainingOptions, LearningRateFollowsTransformersSchedules) {
  TrainingOptions o;
  o.lr = 0.1;
  o.warmup_steps = 4;
  // Warmup: lr * step / warmup, 0 at the first step (LambdaLR's first value).
  for (int s = 0; s < 4; ++s) EXPECT_DOUBLE_EQ(o.LearningRateAt(s, 20), 0.1 * s / 4);
  EXPECT_DOUBLE_EQ(o.LearningRateAt(4, 20), 0.1);
  EXPECT_DOUBLE_EQ(o.LearningRateAt(19, 20), 0.1);  // constant
  o.schedule = LrSchedule::kLinear;                 // 1 - (step - 4) / 16
  EXPECT_DOUBLE_EQ(o.LearningRateAt(4, 20), 0.1);
  EXPECT_DOUBLE_EQ(o.LearningRateAt(12, 20), 0.05);
  EXPECT_DOUBLE_EQ(o.LearningRateAt(20, 20), 0.0);
  o.schedule = LrSchedule::kCosine;
  o.min_lr_ratio = 0.2;  // 0.02 + 0.08 * (1 + cos(pi p)) / 2
  EXPECT_DOUBLE_EQ(o.LearningRateAt(4, 20), 0.1);
  EXPECT_NEAR(o.LearningRateAt(8, 20), 0.02 + 0.08 * (1 + std::cos(std::numbers::pi / 4)) / 2, 1e-15);
  EXPECT_NEAR(o.LearningRateAt(12, 20), 0.06, 1e-15);
  EXPECT_NEAR(o.LearningRateAt(20, 20), 0.02, 1e-15);
  EXPECT_NEAR(o.LearningRateAt(30, 20), 0.02, 1e-15);  // past the span: the minimum
  o.decay_steps = 36;  // a longer schedule than this run (resumed later): p = (12 - 4) / 32
  EXPECT_NEAR(o.LearningRateAt(12, 20), 0.02 + 0.08 * (1 + std::cos(std::numbers::pi / 4)) / 2, 1e-15);
}

TEST(TrainingOptions, RefusesWhatNoRunCanUse) {
  auto expect = [](auto change, const std::string& words) {
    TrainingOptions o;
    change(o);
    test::ExpectError([&] { o.Validate(10); }, {words});
  };
  expect([](TrainingOptions& o) { o.warmup_steps = 11; }, "--warmup-steps 11 is longer than the schedule's 10 steps");
  expect([](TrainingOptions& o) { o.min_lr_ratio = 1.5; }, "--min-lr-ratio 1.5: valid: 0 to 1");
  expect([](TrainingOptions& o) { o.clip_grad = -1; }, "--clip-grad -1");
  expect([](TrainingOptions& o) { o.weight_decay = NAN; }, "--weight-decay nan");
  test::ExpectError([] { runtime::ParseLrSchedule("step"); }, {"--lr-schedule step; valid: constant, linear, cosine"});
  auto [code, out] = test::RunLoom(kTinyLlm + "--steps 2 --warmup-steps 3");
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("--warmup-steps 3 is longer than the schedule's 2 steps (--steps)"), std::string::npos) << out;
}

// --lr 1e30: step 0 is finite and throws every weight to about 1e30, so step
// 1's logits overflow. The run stops there, before that step changes a
// weight, naming it; exit 2. What was recorded is written.
TEST(TrainingLoop, DivergedRunStopsAtTheStepThatDiverged) {
  const std::string metrics = TempPath("diverged_metrics.jsonl");
  fs::remove(metrics);
  auto [code, out] = test::RunLoom(kTinyLlm + "--steps 4 --lr 1e30 --metrics " + metrics);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("training diverged at step 1: the loss is"), std::string::npos) << out;
  std::ifstream in(metrics);
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["step"].get<int>(), lines++);
    EXPECT_TRUE(std::isfinite(j["loss"].get<double>()));
  }
  EXPECT_EQ(lines, 1) << "step 0 was recorded";
}

// --skip-nonfinite: the same run goes on, each non-finite step skipped
// (its gradients dropped), counted and reported.
TEST(TrainingLoop, SkipsNonFiniteStepsWhenAsked) {
  auto [code, out] = test::RunLoom(kTinyLlm + "--steps 4 --lr 1e15 --skip-nonfinite --json");
  ASSERT_EQ(code, 0) << out;
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["nonfinite_skipped_steps"], nlohmann::json({1, 2, 3}));
  EXPECT_TRUE(std::isfinite(j["losses"][0].get<double>()));
  auto [code2, text] = test::RunLoom(kTinyLlm + "--steps 3 --lr 1e15 --skip-nonfinite");
  ASSERT_EQ(code2, 0) << text;
  EXPECT_NE(text.find("step 2: loss nan"), std::string::npos) << text;
  EXPECT_NE(text.find("skipped: the loss or gradient norm was not finite"), std::string::npos) << text;
}

// --metrics: a line per step with the schedule's learning rate, the norm, the
// batch's tokens (8 samples of 32) and their rate; MFU only on a GPU.
// --report: the four charts.
TEST(TrainingLoop, WritesMetricsAndReport) {
  const std::string metrics = TempPath("metrics.jsonl"), report = TempPath("report.html");
  fs::remove(metrics);
  fs::remove(report);
  auto [code, out] = test::RunLoom(kTinyLlm + "--steps 3 --lr-schedule linear --warmup-steps 1 --metrics " + metrics +
                                   " --report " + report);
  ASSERT_EQ(code, 0) << out;
  std::ifstream in(metrics);
  std::string line;
  std::vector<nlohmann::json> rows;
  while (std::getline(in, line)) rows.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(rows.size(), 3u);
  const double lrs[] = {0, 1e-3, 5e-4};  // warmup 0, then linear over steps 1-2 of 3
  for (int s = 0; s < 3; ++s) {
    SCOPED_TRACE(s);
    EXPECT_EQ(rows[s]["step"].get<int>(), s);
    EXPECT_NEAR(rows[s]["lr"].get<double>(), lrs[s], 1e-12);
    EXPECT_GT(rows[s]["grad_norm"].get<double>(), 0);
    EXPECT_EQ(rows[s]["tokens"].get<double>(), 256);
    EXPECT_GT(rows[s]["step_s"].get<double>(), 0);
    EXPECT_NEAR(rows[s]["tokens_per_s"].get<double>(), 256 / rows[s]["step_s"].get<double>(), 1e-6);
    EXPECT_GT(rows[s]["model_flops"].get<double>(), 0);
    EXPECT_TRUE(rows[s]["mfu"].is_null()) << "a CPU run has no GPU peak to measure MFU against";
    EXPECT_FALSE(rows[s]["skipped"].get<bool>());
    EXPECT_GT(rows[s]["data_load_s"].get<double>(), 0);
  }
  // The data path is off the critical path: the loader prepares step s + 1
  // while step s runs, so a step barely waits for its batch.
  EXPECT_EQ(rows[0]["data_wait_s"].get<double>(), 0) << "step 0's batch builds the stages, before the clock";
  for (int s = 1; s < 3; ++s) EXPECT_LT(rows[s]["data_wait_s"].get<double>(), 0.2 * rows[s]["step_s"].get<double>());
  std::stringstream html;
  html << std::ifstream(report).rdbuf();
  size_t charts = 0;
  for (size_t at = html.str().find("<svg"); at != std::string::npos; at = html.str().find("<svg", at + 1)) ++charts;
  EXPECT_EQ(charts, 4u);
  for (const char* title : {"loss", "gradient norm", "learning rate", "tokens/s"}) {
    EXPECT_NE(html.str().find(title), std::string::npos) << title;
  }
}

}  // namespace
}  // namespace loom
