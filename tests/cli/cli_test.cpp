// End-to-end: the `loom` binary's output and exit codes.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace loom {
namespace {

struct CliRun {
  int exit_code;
  std::string out;  // stdout and stderr
};

CliRun Loom(const std::string& args) {
  std::string cmd = std::string(LOOM_BINARY) + " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe)) {
    out.append(buf.data(), n);
  }
  int status = pclose(pipe);
  return {WEXITSTATUS(status), out};
}

TEST(Cli, ModelsListsTheZoo) {
  CliRun r = Loom("models");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* n : {"vlm-s", "mllm-72b", "sd-2.1", "8.03B"}) {
    EXPECT_NE(r.out.find(n), std::string::npos) << n;
  }
}

TEST(Cli, InspectJsonHasTheDocumentedFields) {
  CliRun r = Loom("inspect vlm-s --workload obelics --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["model"], "vlm-s");
  EXPECT_EQ(j["modules"].size(), 3u);
  int64_t sum = 0;
  for (const auto& m : j["modules"]) {
    for (const char* f :
         {"name", "role", "modality", "layers", "hidden", "params", "frozen", "fwd_flops", "compute_intensity"}) {
      EXPECT_TRUE(m.contains(f)) << f;
    }
    sum += m["params"].get<int64_t>();
  }
  EXPECT_EQ(sum, j["params"].get<int64_t>());
}

TEST(Cli, InspectTextModelFlopsMatchTheClosedForm) {
  // One 128-token sample through llama3-8b: forward = 2 x (params - embedding) x tokens + attention.
  CliRun r = Loom("inspect llama3-8b --workload text --seq-len 128 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  double params = j["params"].get<double>() - 128256.0 * 4096;
  double norms = 32 * 2 * 4096.0;
  double attention = 32 * 2.0 * 128 * 128 * 4096;  // causal
  EXPECT_NEAR(j["modules"][0]["fwd_flops"].get<double>(), 2 * (params - norms) * 128 + attention, 1e3);
}

TEST(Cli, BadInputExitsTwoWithTheReason) {
  CliRun unknown = Loom("inspect no-such-model");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.out.find("unknown model 'no-such-model'"), std::string::npos) << unknown.out;
  std::string bad =
      test::WriteTemp("cli_bad.yaml", "model: x\nmodules:\n  - name: a\n    role: encoder\n    bogus: 1\n");
  CliRun yaml = Loom("inspect " + bad);
  EXPECT_EQ(yaml.exit_code, 2);
  EXPECT_NE(yaml.out.find("cli_bad.yaml:"), std::string::npos) << yaml.out;
  CliRun cluster = Loom("inspect vlm-s --cluster h100:0x8");
  EXPECT_EQ(cluster.exit_code, 2);
  CliRun flag = Loom("inspect vlm-s --global-batch -3 --workload obelics");
  EXPECT_EQ(flag.exit_code, 2);
  CliRun seq = Loom("inspect vlm-s --workload obelics --seq-len 100");
  EXPECT_EQ(seq.exit_code, 2);
  EXPECT_NE(seq.out.find("--seq-len applies to the `text` workload"), std::string::npos);
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

TEST(Cli, SimulateJsonAndTrace) {
  std::string trace = test::WriteTemp("trace.json", "");
  CliRun r = Loom(
      "simulate --model llama3-1b --cluster h100:1x4 --workload text --global-batch 8 --pp 4 "
      "--microbatches 8 --schedule zb-h1 --json --trace " +
      trace);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  for (const char* f : {"iteration_time_s", "mfu", "bubble_ratio", "peak_mem_bytes", "throughput_samples_per_s"}) {
    EXPECT_TRUE(j.contains(f)) << f;
  }
  EXPECT_NEAR(j["throughput_samples_per_s"].get<double>() * j["iteration_time_s"].get<double>(), 8.0, 1e-9);
  std::ifstream in(trace);
  auto t = nlohmann::json::parse(in);
  int complete = 0;
  for (const auto& e : t["traceEvents"]) complete += e["ph"] == "X";
  // 4 ranks x 8 microbatches x (F + Bd + W) compute events, plus sends and the gradient sync.
  EXPECT_GE(complete, 4 * 8 * 3);
}

TEST(Cli, SimulateOutOfMemoryNamesTheGpu) {
  CliRun r = Loom(
      "simulate --model qwen2-72b --cluster h100:1x8 --workload text --global-batch 8 --tp 8 "
      "--microbatches 8");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("does not fit in memory"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("GPU group 0 (GPUs 0..7: all pp0)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("over the 78.0 GiB usable on an h100 (its 80.0 GiB less 2.0 GiB of headroom"), std::string::npos)
      << r.out;
}

// Issue 22's small items: `loom --version`; `simulate` takes DP from the
// cluster when TP, PP (and CP) are given; --global-batch applies to the
// model's default workload without --workload.
// Issue 22: a schedule written as PyTorch pipelining's CSV and read back
// simulates to the same iteration; a plan PyTorch cannot run is said.
TEST(Cli, PytorchCsvRoundTripAndRefusal) {
  const std::string csv = test::WriteTemp("cli-zb.csv", "");
  const std::string common = "simulate --model llama3-8b --cluster h100:1x8 --workload text --global-batch 16 --tp 2 ";
  CliRun out = Loom(common + "--pp 4 --microbatches 8 --schedule zb-h1 --json --export-pytorch-csv " + csv);
  ASSERT_EQ(out.exit_code, 0) << out.out;
  CliRun back = Loom(common + "--import-pytorch-csv " + csv + " --json");
  ASSERT_EQ(back.exit_code, 0) << back.out;
  const double t_out = nlohmann::json::parse(out.out.substr(out.out.find('{'))).at("iteration_time_s");
  const double t_back = nlohmann::json::parse(back.out.substr(back.out.find('{'))).at("iteration_time_s");
  EXPECT_DOUBLE_EQ(t_out, t_back);
  std::ifstream in(csv);
  std::string first;
  std::getline(in, first);
  EXPECT_EQ(first.substr(0, 16), "0F0,0F1,0F2,0F3,") << first;  // ZB-H1: rank 0 warms up with pp forwards
  CliRun bad = Loom(common + "--import-pytorch-csv " + test::WriteTemp("cli-bad.csv", "0F0,0B0\n0F1,0B1\n"));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.out.find("stage 0 is on both rank 0 and rank 1"), std::string::npos) << bad.out;
}

TEST(Cli, VersionInferredDpAndDefaultWorkloadOverrides) {
  auto [vcode, vout] = test::RunLoom("--version");
  EXPECT_EQ(vcode, 0) << vout;
  EXPECT_EQ(vout.rfind("loom 0.", 0), 0u) << vout;
  auto [code, out] = test::RunLoom(
      "simulate --model llama3-1b --cluster h100:1x8 --tp 2 --pp 2 --global-batch 64 "
      "--microbatches 4");
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("workload text (global batch 64): tp 2 pp 2 dp 2 cp 1"), std::string::npos) << out;
}

}  // namespace
}  // namespace loom
