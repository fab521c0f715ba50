// Issue 45: a plan file did not record what it was made for, so a plan and its
// per-batch schedules made for one precision, sequence length, ZeRO stage or
// seed replayed on another with exit 0; so did a batch that deferred every
// sample. Plans now carry "made_for" and replays check it, naming the flag.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "test_util.h"

namespace loom {
namespace {

const std::string kMadeForArgs = std::string("--model ") + LOOM_TEST_DATA + "/runtime/tiny-vlm.yaml --workload " +
                                 LOOM_TEST_DATA + "/runtime/tiny-laion.yaml --cluster h100:1x2 ";

nlohmann::json ReadMadeForJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// The entry of `loom plan --json`'s strategies named `name`.
nlohmann::json& MadeForStrategy(nlohmann::json& j, const std::string& name) {
  for (auto& s : j["strategies"]) {
    if (s["name"] == name) return s;
  }
  ADD_FAILURE() << "no strategy " << name;
  return j;
}

TEST(PlanMadeFor, APlanReplaysOnlyUnderWhatItWasMadeFor) {
  const std::string plan = test::WriteTemp("made-for.json", "");
  auto [code, out] =
      test::RunLoom("plan " + kMadeForArgs + "--strategy pipeweaver,megatron --iterations 2 --json " + plan);
  ASSERT_EQ(code, 0) << out;
  nlohmann::json j = ReadMadeForJson(plan);
  const nlohmann::json made_for = MadeForStrategy(j, "pipeweaver")["plan"]["made_for"];
  EXPECT_EQ(made_for["precision"], "fp32") << made_for;  // tiny-laion.yaml's
  EXPECT_EQ(made_for["zero_stage"], 1) << made_for;
  EXPECT_EQ(made_for["seed"], 0) << made_for;
  EXPECT_GT(made_for["seq_len"].get<int64_t>(), 0) << made_for;

  const std::string replay = "simulate " + kMadeForArgs + "--plan " + plan + " --strategy pipeweaver";
  std::tie(code, out) = test::RunLoom(replay);
  EXPECT_EQ(code, 0) << out;
  const struct {
    std::string flags, says;
  } refused[] = {
      {"--precision bf16", "the plan was made for precision fp32, not bf16; pass --precision fp32"},
      {"--zero-stage 0", "made for ZeRO stage 1, not 0; pass --zero-stage 1"},
      {"--seed 7", "made for seed 0, not 7 (its batches' schedules place that seed's samples); pass --seed 0"},
  };
  for (const auto& r : refused) {
    std::tie(code, out) = test::RunLoom(replay + " " + r.flags);
    EXPECT_EQ(code, 2) << r.flags << "\n" << out;
    EXPECT_NE(out.find(r.says), std::string::npos) << r.flags << "\n" << out;
  }
  // `loom run` checks the precision too: its runtime computes in it.
  std::tie(code, out) =
      test::RunLoom("run " + kMadeForArgs + "--plan " + plan + " --strategy pipeweaver --precision bf16 --steps 1");
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("the plan was made for precision fp32, not bf16; pass --precision fp32"), std::string::npos)
      << out;
  // Megatron-LM's plan records no per-batch schedule: another seed draws other
  // samples into the same static layout, which is what a static plan is for.
  std::tie(code, out) = test::RunLoom("simulate " + kMadeForArgs + "--plan " + plan + " --strategy megatron --seed 7");
  EXPECT_EQ(code, 0) << out;
  // The sequence length, on a text workload (it sets the text samples' length).
  const std::string text_args =
      std::string("--model ") + LOOM_TEST_DATA + "/runtime/tiny-llm.yaml --workload text --cluster h100:1x2 ";
  std::tie(code, out) = test::RunLoom("plan " + text_args + "--seq-len 64 --strategy megatron --json " + plan);
  ASSERT_EQ(code, 0) << out;
  std::tie(code, out) = test::RunLoom("simulate " + text_args + "--seq-len 64 --plan " + plan);
  EXPECT_EQ(code, 0) << out;
  std::tie(code, out) = test::RunLoom("simulate " + text_args + "--seq-len 128 --plan " + plan);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("made for a sequence length of 64, not 128; pass --seq-len 64"), std::string::npos) << out;
}

TEST(PlanMadeFor, ABatchThatDefersEverySampleIsRefused) {
  const std::string plan = test::WriteTemp("made-for-deferred.json", "");
  auto [code, out] = test::RunLoom("plan " + kMadeForArgs + "--strategy pipeweaver --iterations 1 --json " + plan);
  ASSERT_EQ(code, 0) << out;
  nlohmann::json j = ReadMadeForJson(plan);
  nlohmann::json& schedule = j["strategies"][0]["batches"][0]["schedule"];
  const int64_t batch = j["global_batch"].get<int64_t>();
  schedule["deferred"] = nlohmann::json::array();
  for (int64_t s = 0; s < batch; ++s) schedule["deferred"].push_back(s);
  for (auto& mb : schedule["microbatch_samples"]) mb = nlohmann::json::array();
  schedule.erase("unit_microbatch_samples");
  std::ofstream(plan) << j.dump();
  std::tie(code, out) = test::RunLoom("simulate " + kMadeForArgs + "--plan " + plan);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("all " + std::to_string(batch) + " samples are deferred; a batch trains at least one"),
            std::string::npos)
      << out;
}

TEST(PlanMadeFor, APlanWithoutTheRecordStillReplays) {
  // Files written before plans recorded "made_for" are not refused: nothing to check against.
  const std::string plan = test::WriteTemp("made-for-old.json", "");
  auto [code, out] = test::RunLoom("plan " + kMadeForArgs + "--strategy megatron --json " + plan);
  ASSERT_EQ(code, 0) << out;
  nlohmann::json j = ReadMadeForJson(plan);
  j["strategies"][0]["plan"].erase("made_for");
  std::ofstream(plan) << j.dump();
  std::tie(code, out) = test::RunLoom("simulate " + kMadeForArgs + "--plan " + plan + " --precision fp32");
  EXPECT_EQ(code, 0) << out;
}

}  // namespace
}  // namespace loom
