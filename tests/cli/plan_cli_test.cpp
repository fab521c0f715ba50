// End-to-end: `loom plan` and `loom simulate --plan`.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <algorithm>

#include <array>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "test_util.h"

namespace loom {
namespace {

std::pair<int, std::string> LoomCli(const std::string& args) { return test::RunLoom(args); }

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(PlanCli, ComparesStrategiesAndWritesJsonReportTraceAndExport) {
  const std::string json = test::WriteTemp("plans.json", ""), html = test::WriteTemp("report.html", ""),
                    trace = test::WriteTemp("best.trace.json", "");
  auto [code, out] = LoomCli(
      "plan --model vlm-s --cluster h800:2x8 --workload obelics --global-batch 16 --iterations 2 "
      "--json " +
      json + " --report " + html + " --trace " + trace + " --export megatron");
  ASSERT_EQ(code, 0) << out;
  for (const char* s :
       {"megatron", "fsdp", "distmm", "optimus", "nnscaler", "disttrain", "dip", "mmscale", "pipeweaver", "oobleck",
        "cornstarch", "entrain", "vs megatron", "* best:", "--tensor-model-parallel-size", "cannot express"}) {
    EXPECT_NE(out.find(s), std::string::npos) << s << "\n" << out;
  }
  auto j = nlohmann::json::parse(Slurp(json));
  ASSERT_TRUE(j["best"].is_string());
  // `all` is every strategy but the variants (mmscale-ratio, mmscale-noreorder, pipeweaver-*, mosaic-*,
  // cornstarch-unaware, megatron-encoders-first, entrain-*).
  ASSERT_EQ(j["strategies"].size(), 14u);
  double best_time = 1e30;
  for (const auto& s : j["strategies"]) {
    for (const char* k : {"name", "config", "iteration_time_s", "throughput_samples_per_s", "mfu", "bubble_ratio",
                          "peak_mem_bytes", "planning_time_s", "plan"}) {
      EXPECT_TRUE(s.contains(k)) << s["name"] << " lacks " << k;
    }
    best_time = std::min(best_time, s["iteration_time_s"].get<double>());
    // mmscale and disttrain (data-aware reordering), pipeweaver (woven pipelines) and entrain
    // (stratified microbatches, deferral) schedule each batch.
    EXPECT_EQ(s["batch_schedule_time_s"].get<double>() > 0,
              s["name"] == "mmscale" || s["name"] == "disttrain" || s["name"] == "pipeweaver" || s["name"] == "entrain")
        << s["name"];
  }
  for (const auto& s : j["strategies"]) {
    if (s["name"] == j["best"] && s.contains("iteration_time_s")) {
      EXPECT_DOUBLE_EQ(s["iteration_time_s"].get<double>(), best_time);
    }
  }
  // Issue 43: each strategy's Megatron-LM bundle beside its plan, and the best plan per engine.
  for (const auto& s : j["strategies"]) {
    if (!s.contains("plan")) continue;
    ASSERT_TRUE(s.contains("megatron")) << s["name"];
    const auto& m = s["megatron"];
    if (s["name"] == "megatron") {
      ASSERT_TRUE(m["expressible"].get<bool>()) << m.dump();
      EXPECT_EQ(m["entry"], "pretrain_vlm.py");
      EXPECT_EQ(m["env"]["CUDA_DEVICE_MAX_CONNECTIONS"], "1");
      const auto& args = m["args"];
      EXPECT_NE(std::find(args.begin(), args.end(), "--num-layers"), args.end()) << args.dump();
      EXPECT_EQ(m["world_size"], 16);
    }
    if (!m["expressible"].get<bool>()) EXPECT_FALSE(m["notes"].get<std::string>().empty()) << s["name"];
  }
  ASSERT_EQ(j["engines"].size(), 4u);
  EXPECT_EQ(j["engines"][3]["strategy"], j["best"]);  // Loom's runtime runs the best plan
  EXPECT_NE(out.find("Best plan each engine can run"), std::string::npos);
  const std::string report = Slurp(html);
  EXPECT_NE(report.find("<svg"), std::string::npos);
  EXPECT_EQ(report.find("http://"), report.find("http://www.w3.org"));  // no network resources
  EXPECT_EQ(report.find("<script"), std::string::npos);
  EXPECT_NE(report.find("Memory per GPU"), std::string::npos);
  EXPECT_NE(report.find("Units and brokers"), std::string::npos);
  EXPECT_NE(report.find("encoder &rarr; backbone"), std::string::npos);  // mmscale's broker
  EXPECT_TRUE(nlohmann::json::parse(Slurp(trace)).contains("traceEvents"));

  // The JSON's best plan simulates again through `simulate --plan`.
  auto [code2, out2] = LoomCli(
      "simulate --model vlm-s --cluster h800:2x8 --workload obelics --global-batch 16 --plan " + json + " --json");
  ASSERT_EQ(code2, 0) << out2;
  EXPECT_GT((nlohmann::json::parse(out2)["iteration_time_s"].get<double>()), 0);
}

TEST(PlanCli, BadInputExitsTwo) {
  auto [c1, o1] = LoomCli("plan --model vlm-s --cluster h800:2x8 --strategy megatron,nope");
  EXPECT_EQ(c1, 2);
  EXPECT_NE(o1.find("unknown strategy 'nope'; valid: megatron, fsdp"), std::string::npos) << o1;
  auto [c2, o2] = LoomCli("plan --model vlm-s --cluster h800:2x8 --iterations 0");
  EXPECT_EQ(c2, 2);
  EXPECT_NE(o2.find("--iterations: 0 is out of range; valid: an integer in 1..2147483647"), std::string::npos) << o2;
  auto [c3, o3] = LoomCli("plan --model vlm-s --cluster h800:2x8 --export deepspeed");
  EXPECT_EQ(c3, 2);
  // A plan for a different cluster is rejected with every violation.
  const std::string plan = test::WriteTemp("plan16.json", "");
  LoomCli(
      "plan --model vlm-s --cluster h800:2x8 --workload obelics --global-batch 16 --iterations 1 --strategy megatron "
      "--json " +
      plan);
  auto [c4, o4] =
      LoomCli("simulate --model vlm-s --cluster h800:1x8 --workload obelics --global-batch 16 --plan " + plan);
  EXPECT_EQ(c4, 2);
  EXPECT_NE(o4.find("invalid plan"), std::string::npos) << o4;
  EXPECT_NE(o4.find("the cluster has"), std::string::npos) << o4;
  // Nothing fits: a 70B model on one GPU.
  auto [c5, o5] = LoomCli("plan --model llama-70b --cluster h100:1x1 --workload text --global-batch 1 --iterations 1");
  EXPECT_EQ(c5, 2);
  EXPECT_NE(o5.find("do not fit in memory"), std::string::npos) << o5;
}

// Issue 13: `loom plan --json` writes every simulated batch with its schedule,
// and `loom simulate --plan` replays exactly those batches with exactly those
// schedules: the same iteration times, bit for bit (the JSON round-trips doubles).
TEST(PlanCli, SimulatePlanReplaysEveryRecordedBatchExactly) {
  const std::string json = test::WriteTemp("simulate-replays-batches.json", "");
  const std::string common = "--model vlm-s --cluster h800:2x8 --workload obelics --global-batch 16";
  auto [code, out] = LoomCli("plan " + common +
                             " --iterations 3 --strategy megatron,mmscale,pipeweaver "
                             "--schedule-rollouts 50 --json " +
                             json);
  ASSERT_EQ(code, 0) << out;
  const auto j = nlohmann::json::parse(Slurp(json));
  for (const auto& s : j["strategies"]) {
    const std::string name = s["name"];
    SCOPED_TRACE(name);
    ASSERT_EQ(s["batches"].size(), 3u);
    for (const auto& b : s["batches"]) EXPECT_EQ(b.contains("schedule"), name != "megatron");
    // The file records what it was planned on: --plan alone replays it (issue 43).
    auto [rc, rout] = LoomCli("simulate --json --plan " + json + " --strategy " + name);
    ASSERT_EQ(rc, 0) << rout;
    const auto r = nlohmann::json::parse(rout);
    ASSERT_EQ(r["batches"].size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(r["batches"][i]["iteration"], s["batches"][i]["iteration"]);
      EXPECT_EQ(r["batches"][i]["iteration_time_s"].get<double>(), s["batches"][i]["iteration_time_s"].get<double>());
    }
    EXPECT_DOUBLE_EQ(r["iteration_time_s"].get<double>(), s["iteration_time_s"].get<double>());
  }
  EXPECT_EQ(j["problem"]["model"], "vlm-s");
  EXPECT_EQ(j["problem"]["cluster"], "h800:2x8");
  EXPECT_EQ(j["problem"]["global_batch"], 16);
  // Without --plan, --model and --cluster are required.
  auto [rc0, out0] = LoomCli("simulate --cluster h800:2x8 --tp 2");
  EXPECT_EQ(rc0, 2);
  EXPECT_NE(out0.find("--model is required"), std::string::npos) << out0;
  // A bare plan records no problem: --model and --cluster are asked for.
  const std::string bare = test::WriteTemp("simulate-bare.json", j["strategies"][0]["plan"].dump());
  auto [rcb, outb] = LoomCli("simulate --plan " + bare);
  EXPECT_EQ(rcb, 2);
  EXPECT_NE(outb.find("records no problem"), std::string::npos) << outb;
  // A plan replayed on another workload, or a strategy the file lacks, is an error naming it.
  auto [rc1, out1] = LoomCli("simulate --model vlm-s --cluster h800:2x8 --workload text --global-batch 16 --plan " +
                             json + " --strategy megatron");
  EXPECT_EQ(rc1, 2);
  EXPECT_NE(out1.find("made for workload 'obelics'"), std::string::npos) << out1;
  auto [rc3, out3] = LoomCli("simulate --model vlm-s --cluster h100:2x8 --workload obelics --global-batch 16 --plan " +
                             json + " --strategy megatron");
  EXPECT_EQ(rc3, 2);
  EXPECT_NE(out3.find("made for cluster 'h800:2x8'"), std::string::npos) << out3;
  auto [rc2, out2] = LoomCli("simulate " + common + " --plan " + json + " --strategy fsdp");
  EXPECT_EQ(rc2, 2);
  EXPECT_NE(out2.find("no strategy named 'fsdp'"), std::string::npos) << out2;
}

// --profile: the shipped H100 profile is the default on H100 and H800; the
// roofline and a profile file can be chosen; a profile of another GPU is an error.
TEST(PlanCli, ProfileFlagChoosesTheCostModel) {
  const std::string args =
      "simulate --model llama3-1b --cluster h100:1x1 --workload text --global-batch 8 "
      "--seq-len 4096 --microbatches 4 --json";
  auto time_of = [&](const std::string& extra) {
    auto [code, out] = LoomCli(args + extra);
    EXPECT_EQ(code, 0) << out;
    return code == 0 ? nlohmann::json::parse(out)["iteration_time_s"].get<double>() : 0.0;
  };
  const double by_default = time_of(""), roofline = time_of(" --profile roofline");
  const double file = time_of(std::string(" --profile ") + LOOM_SOURCE_DIR + "/src/loom/cost/profiles/h100.yaml");
  EXPECT_EQ(by_default, file);      // the default is the shipped profile
  EXPECT_GT(by_default, roofline);  // measured kernels are slower than the datasheet roofline
  auto [code, out] = LoomCli(
      "simulate --model llama3-1b --cluster a800:1x1 --workload text --global-batch 8 "
      "--microbatches 4 --profile " +
      std::string(LOOM_SOURCE_DIR) + "/src/loom/cost/profiles/h100.yaml");
  EXPECT_EQ(code, 2);
  EXPECT_NE(out.find("measured on h100"), std::string::npos) << out;
  EXPECT_NE(out.find("a800"), std::string::npos) << out;
  auto [code2, out2] = LoomCli(args + " --profile /nonexistent.yaml");
  EXPECT_EQ(code2, 2);
  EXPECT_NE(out2.find("/nonexistent.yaml"), std::string::npos) << out2;
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// Issue 43: the table was about 215 columns wide and its configuration strings
// had no legend. The default fits 160 columns and explains each notation it
// shows (and only those); --wide keeps whole configurations and every column.
TEST(PlanCli, TheTableFits160ColumnsWithALegendAndWideKeepsEverything) {
  const std::string common =
      "plan --model vlm-s --cluster h800:2x8 --workload obelics --global-batch 32 --iterations 1";
  auto [code, out] = LoomCli(common + " --strategy megatron,distmm,mmscale,pipeweaver,mosaic,oobleck");
  ASSERT_EQ(code, 0) << out;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) EXPECT_LE(line.size(), 160u) << line;
  for (const char* notation : {"tpN", "mN", "name:KnBm", "name dN P%", "f=F k x", "brokers a->b xN", "a; b"}) {
    EXPECT_NE(out.find(notation), std::string::npos) << notation << "\n" << out;
  }
  EXPECT_EQ(out.find("before/after"), std::string::npos) << "Optimus' notation without Optimus:\n" << out;
  EXPECT_EQ(out.find("iter max"), std::string::npos) << out;
  auto [wcode, wout] = LoomCli(common + " --strategy megatron,mmscale,distmm --wide");
  ASSERT_EQ(wcode, 0) << wout;
  EXPECT_NE(wout.find("iter max"), std::string::npos) << wout;
  EXPECT_NE(wout.find("plan time"), std::string::npos) << wout;
  EXPECT_NE(wout.find("brokers encoder->backbone"), std::string::npos) << wout;  // whole, not cut
  // GPU counts multiply out to the cluster: DistMM's encoder wave runs 4 replicas of
  // 4-GPU groups whose GPUs split the sequences (16 GPUs, as its backbone's tp4 x dp4).
  EXPECT_NE(wout.find("branch0 tp1 pp1 dp4x4 m8"), std::string::npos) << wout;
  EXPECT_NE(wout.find("backbone tp4 pp1 dp4 m8"), std::string::npos) << wout;
}

// Issue 43: `--config FILE` takes the same flags as YAML; the command line's win.
TEST(PlanCli, ConfigFileTakesTheFlagsAsYaml) {
  const std::string config = test::WriteTemp("plan-config.yaml",
                                             "model: vlm-s\ncluster: h800:2x8\nworkload: obelics\nglobal-batch: 32\n"
                                             "iterations: 1\nstrategy: [megatron]\nwide: true\n");
  auto [code, out] = LoomCli("plan --config " + config + " --global-batch 16");
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("vlm-s on h800:2x8 (16 GPUs), workload obelics, global batch 16"), std::string::npos) << out;
  EXPECT_NE(out.find("iter max"), std::string::npos) << out;  // wide: true
  const struct {
    std::string yaml, says;
  } bad[] = {
      {"model: vlm-s\nclustr: h800:2x8\n", ":2:1: clustr: not a flag of `loom plan`; did you mean 'cluster'?"},
      {"model: vlm-s\ncluster: h800:2x8\nwide: yes\n", ":3:1: wide: 'yes'; valid: true or false (a flag)"},
      {"model: {name: vlm-s}\n", ":1:1: model: a mapping; valid: a value, or a list of values"},
      {"- model\n", "expected a mapping of flags"},
  };
  for (const auto& b : bad) {
    const std::string path = test::WriteTemp("plan-config-bad.yaml", b.yaml);
    auto [bcode, bout] = LoomCli("plan --config " + path);
    EXPECT_EQ(bcode, 2) << b.yaml << bout;
    EXPECT_NE(bout.find(path + b.says.substr(0, b.says[0] == ':' ? std::string::npos : 0)), std::string::npos)
        << b.yaml << bout;
    EXPECT_NE(bout.find(b.says), std::string::npos) << b.yaml << bout;
  }
}

}  // namespace
}  // namespace loom
