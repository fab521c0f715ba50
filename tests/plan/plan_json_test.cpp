#include <gtest/gtest.h>

#include "loom/error.h"
#include "loom/plan/plan_json.h"
#include "loom/strategies/strategy.h"
#include "plan/plan_test_util.h"
#include "test_util.h"

namespace loom {
namespace {

TEST(PlanJson, EveryShapeRoundTrips) {
  test::Fixture f;
  std::vector<Plan> plans = {test::MegatronShape(f), test::DisaggregatedShape(f), test::TemporalShape(f, 0.5),
                             test::HeterogeneousShape(f)};
  plans[0].units[0].zero_stage = 3;
  plans[0].searched = "everything";
  plans[2].phase_rounds = 2;  // written only when not 1
  EXPECT_EQ(PlanToJson(plans[2])["phase_rounds"], 2);
  EXPECT_FALSE(PlanToJson(plans[1]).contains("phase_rounds"));
  for (const Plan& p : plans) {
    SCOPED_TRACE(p.strategy);
    nlohmann::json j = PlanToJson(p);
    EXPECT_EQ(PlanFromJson(j, "mem"), p);
    // Through text too (what files hold).
    EXPECT_EQ(PlanFromJson(nlohmann::json::parse(j.dump()), "mem"), p);
  }
}

TEST(PlanJson, StrategyPlansRoundTripThroughFiles) {
  test::Fixture f;
  for (const auto& name : StrategyNames()) {
    Plan p = RunStrategy(name, f.ctx()).plan;
    std::string path = test::WriteTemp("plan_" + name + ".json", PlanToJson(p).dump(2));
    EXPECT_EQ(LoadPlan(path), p) << name;
  }
}

TEST(PlanJson, LoadPlanTakesTheBestOfAComparison) {
  test::Fixture f;
  Plan p = test::DisaggregatedShape(f);
  nlohmann::json cmp = {
      {"best", "b"},
      {"strategies",
       {{{"name", "a"}, {"plan", PlanToJson(test::MegatronShape(f))}}, {{"name", "b"}, {"plan", PlanToJson(p)}}}}};
  EXPECT_EQ(LoadPlan(test::WriteTemp("cmp.json", cmp.dump())), p);
}

TEST(PlanJson, IterationScheduleRoundTrips) {
  IterationSchedule s;
  s.iteration = 7;
  s.microbatch_samples = {{0, 3}, {1}, {2, 5}};
  s.deferred = {4};
  s.sub_microbatches["encoder"] = {2, 1, 3};
  EXPECT_EQ(IterationScheduleFromJson(IterationScheduleToJson(s), "mem"), s);
}

TEST(PlanJson, ErrorsNameTheFileAndField) {
  test::Fixture f;
  nlohmann::json j = PlanToJson(test::MegatronShape(f));
  j["units"][0]["pipelines"][0]["pp"] = "two";
  test::ExpectError([&] { PlanFromJson(j, "p.json"); }, {"p.json", "units[0].pipelines[0].pp", "integer"});
  j = PlanToJson(test::MegatronShape(f));
  j["units"][0]["tpp"] = 2;
  test::ExpectError([&] { PlanFromJson(j, "p.json"); }, {"units[0].tpp", "unknown key", "tp"});
  j = PlanToJson(test::MegatronShape(f));
  j["units"][0]["recompute"] = "some";
  test::ExpectError([&] { PlanFromJson(j, "p.json"); }, {"units[0].recompute", "none, selective, full"});
  test::ExpectError([&] { LoadPlan(test::WriteTemp("bad.json", "{\"units\": [")); }, {"bad.json", "malformed JSON"});
  test::ExpectError([&] { LoadPlan("/no/such/plan.json"); }, {"/no/such/plan.json: no such file; expected a plan JSON file"});
  // Found by fuzz/plan_json_fuzzer.cpp: nlohmann throws out_of_range, not parse_error, for this.
  test::ExpectError([&] { ParsePlanFile("{\"units\": [{\"tp\": 0.1E2749124171373}]}", "big.json"); },
                    {"big.json", "malformed JSON", "number overflow"});
  // Second audit: past an int is said as the storage's limit (it listed negative degrees as
  // valid); a comparison file without a plan says so (its "valid:" list was empty).
  j = PlanToJson(test::MegatronShape(f));
  j["units"][0]["tp"] = int64_t{1} << 40;
  test::ExpectError([&] { PlanFromJson(j, "p.json"); },
                    {"units[0].tp", "1099511627776 is out of range: past a plan's integers"});
  test::ExpectError(
      [&] { LoadPlanFile(test::WriteTemp("none.json", R"({"best": "megatron", "strategies": []})"), "megatron"); },
      {"none.json: no strategy in it has a plan"});
  // Third audit (J055): inside a comparison the errors name the plan's place
  // in the file, not "the document" of the plan object.
  nlohmann::json cmp = {{"best", "megatron"}, {"strategies", {{{"name", "megatron"}, {"plan", nullptr}}}}};
  test::ExpectError([&] { ParsePlanFile(cmp.dump(), "cmp.json"); },
                    {"cmp.json: strategies[0].plan: must be an object, got null"});
  cmp["strategies"][0]["plan"] = PlanToJson(test::MegatronShape(f));
  cmp["strategies"][0]["plan"]["units"][0]["tp"] = "two";
  test::ExpectError([&] { ParsePlanFile(cmp.dump(), "cmp.json"); },
                    {"cmp.json: strategies[0].plan.units[0].tp: must be an integer"});
  cmp["strategies"][0]["plan"] = PlanToJson(test::MegatronShape(f));
  cmp["strategies"][0]["batches"] = {{{"iteration", 0}, {"schedule", {{"microbatch_samples", {5}}}}}};
  test::ExpectError([&] { ParsePlanFile(cmp.dump(), "cmp.json"); },
                    {"cmp.json: strategies[0].batches[0].schedule.microbatch_samples[0]: must be an array"});
}

}  // namespace
}  // namespace loom
