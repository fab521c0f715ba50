// Issue 45, "flags silently ignored or wrapped": every number a flag or an
// environment variable gives goes through one checked parser whose message
// names the range, and the layout flags are refused beside --plan instead
// of being ignored. Each case exits 2 before any worker starts.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <thread>

#include "test_util.h"

namespace loom {
namespace {

// `command` through the shell (to set environment variables); exit code and stdout + stderr.
std::pair<int, std::string> RunShell(const std::string& command) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  return {WEXITSTATUS(pclose(pipe)), out};
}

TEST(NumberFlags, OutOfRangeNumbersAndIgnoredFlagsExitTwoNamingTheRange) {
  const std::string run = "run --model " + std::string(LOOM_TEST_DATA) + "/runtime/tiny-llm.yaml --cluster h100:1x1 --steps 1";
  const std::string plan = test::WriteTemp("numbers-plan.json", "{}");
  const std::vector<std::pair<std::string, std::string>> cases = {
      // A port past 65535 was wrapped to 16 bits and used.
      {run + " --nnodes 2 --node-rank 1 --master 127.0.0.1:70000", "--master port: 70000 is out of range; valid: an integer in 1..65535"},
      {"MASTER_ADDR=127.0.0.1 MASTER_PORT=99999 NNODES=2 NODE_RANK=1 " + std::string(LOOM_BINARY) + " " + run,
       "MASTER_PORT: 99999 is out of range; valid: an integer in 1..65535"},
      {"MASTER_ADDR=127.0.0.1 MASTER_PORT=12ab NNODES=2 NODE_RANK=1 " + std::string(LOOM_BINARY) + " " + run,
       "MASTER_PORT: '12ab' is not an integer in 1..65535"},
      // 1e300 s overflowed inside Gloo's millisecond timeout.
      {run + " --timeout 1e300", "--timeout: 1e300 is out of range; valid: a number > 0 and <= 604800"},
      {run + " --timeout nan", "--timeout: nan is out of range"},
      // 100000 threads per rank ended as "silent for over 30 s".
      {run + " --threads 100000",
       "--threads: 100000 is out of range; valid: an integer in 1.." + std::to_string(std::max(1u, std::thread::hardware_concurrency()))},
      // Layout flags beside --plan were ignored.
      {run + " --plan " + plan + " --tp 2", "--plan excludes --tp"},
      {run + " --plan " + plan + " --schedule gpipe", "--plan excludes --schedule"},
      {"simulate --model llama3-1b --cluster h100:1x8 --plan " + plan + " --pp 2", "--pp excludes --plan"},
  };
  for (const auto& [args, expected] : cases) {
    SCOPED_TRACE(args);
    // Cases that set the environment run the binary through the shell themselves.
    const bool env = args.rfind("MASTER_", 0) == 0;
    auto [code, out] = env ? RunShell(args) : test::RunLoom(args);
    EXPECT_EQ(code, 2) << out;
    EXPECT_NE(out.find(expected), std::string::npos) << out;
  }
}

}  // namespace
}  // namespace loom
