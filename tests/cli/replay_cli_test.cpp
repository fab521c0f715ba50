// End-to-end: `loom replay` prints the comparison, writes the SVG plot and
// the JSON, and rejects bad input with exit code 2.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "test_util.h"

namespace loom {
namespace {

TEST(ReplayCli, ComparesSystemsAndWritesPlotAndJson) {
  const std::string svg = test::WriteTemp("replay.svg", ""), json = test::WriteTemp("replay.json", ""),
                    html = test::WriteTemp("replay.html", "");
  auto [code, out] = test::RunLoom("replay --model gpt3-medium --cluster h100:6x1 --mtbf 1200 --hours 3 --svg " + svg +
                                   " --json " + json + " --report " + html);
  ASSERT_EQ(code, 0) << out;
  for (const char* s : {"oobleck", "varuna", "bamboo", "samples/s", "lost per failure"}) {
    EXPECT_NE(out.find(s), std::string::npos) << s << "\n" << out;
  }
  std::ifstream in_svg(svg);
  std::stringstream text;
  text << in_svg.rdbuf();
  EXPECT_NE(text.str().find("<polyline"), std::string::npos);
  std::ifstream in_html(html);
  std::stringstream page;
  page << in_html.rdbuf();
  for (const char* s : {"<svg", "<polyline", "lost per failure", "<h2>varuna</h2>", "</html>"}) {
    EXPECT_NE(page.str().find(s), std::string::npos) << s;
  }
  const auto j = nlohmann::json::parse(std::ifstream(json));
  EXPECT_EQ(j["systems"].size(), 3u);
  EXPECT_EQ(j["nodes"], 6);
  // Table 2.4's ablation: free checkpoints every 2 iterations lose less per failure.
  const std::string free_json = test::WriteTemp("replay-free.json", "");
  auto [code2, out2] = test::RunLoom(
      "replay --model gpt3-medium --cluster h100:6x1 --mtbf 1200 --hours 3 --systems "
      "varuna --free-checkpoints --checkpoint-every 2 --json " +
      free_json);
  ASSERT_EQ(code2, 0) << out2;
  const auto jf = nlohmann::json::parse(std::ifstream(free_json));
  auto lost = [](const nlohmann::json& sys) {
    double sum = 0;
    for (const auto& e : sys["events"]) sum += e["lost_s"].get<double>();
    return sum;
  };
  EXPECT_LT(lost(jf["systems"][0]), lost(j["systems"][1]));  // varuna is second in the default run
  auto [bad, msg] = test::RunLoom("replay --model gpt3-medium --cluster h100:6x1 --systems oobleck,checkfreq");
  EXPECT_EQ(bad, 2);
  EXPECT_NE(msg.find("unknown system 'checkfreq'"), std::string::npos) << msg;
  auto [bad_trace, msg2] = test::RunLoom("replay --model gpt3-medium --cluster h100:6x1 --failures /nonexistent.txt");
  EXPECT_EQ(bad_trace, 2);
  EXPECT_NE(msg2.find("/nonexistent.txt: no such file; expected a failure trace file"), std::string::npos) << msg2;
}

// Audit A5-01 to A5-06: what a replay cannot be is refused before any work,
// an event it does not replay is said, and a stop always has its reason.
TEST(ReplayCli, SpansAndTracesItCannotReplayAreSaid) {
  const std::string replay = "replay --model gpt3-medium --cluster a40:4x1 ";
  const std::string at_zero = test::WriteTemp("replay-at-zero.txt", "0 fail 1\n");
  const std::string long_trace = test::WriteTemp("replay-long.txt", "100 fail 1\n100000 fail 2\n");
  const std::string fail_join = test::WriteTemp("replay-fail-join.txt", "100 fail 1\n3000 join 1\n");
  const std::vector<std::pair<std::string, std::string>> refused = {
      // 1e306 hours overflowed to infinite seconds, and the plot's tick loop never ended.
      {replay + "--hours 1e306 --svg " + test::WriteTemp("replay-inf.svg", ""),
       "--hours: 1e306 is out of range; valid: a number > 0 and <= 100000"},
      {replay + "--restart-s 1e308", "--restart-s: 1e308 is out of range; valid: a number from 0 to 3.6e+08"},
      {replay + "--failures " + at_zero + " --until-last-failure",
       "--until-last-failure: the trace's last failure is at 0 s, so nothing would be replayed"},
      {replay + "--failures " + long_trace + " --until-last-failure --hours 1",
       "--hours: the replay ends at the trace's last failure with --until-last-failure: give one of them"},
      // A model no system fits on the cluster: as `loom plan`, exit 2.
      {"replay --model llama-70b --cluster a40:2x1 --hours 1", "no system trains llama-70b on a40:2x1"},
  };
  for (const auto& [args, words] : refused) {
    SCOPED_TRACE(args);
    auto [code, out] = test::RunLoom(args);
    EXPECT_EQ(code, 2) << out;
    EXPECT_NE(out.find(words), std::string::npos) << out;
  }
  // A trace's events past --hours are said, with the --hours that covers them.
  auto [code, out] = test::RunLoom(replay + "--systems oobleck --hours 1 --failures " + long_trace);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("note: 1 of " + long_trace +
                     "'s events are at or after the 1 h replayed (the first at 100000 s) and are not replayed; "
                     "--hours 28 covers them"),
            std::string::npos)
      << out;
  // --until-last-failure ends at the last failure, not at a join after it.
  const std::string json = test::WriteTemp("replay-fail-join.json", "");
  auto [code2, out2] =
      test::RunLoom(replay + "--systems oobleck --until-last-failure --failures " + fail_join + " --json " + json);
  ASSERT_EQ(code2, 0) << out2;
  EXPECT_EQ(nlohmann::json::parse(std::ifstream(json))["duration_s"].get<double>(), 100);
  // Every node lost: the reason is said ("no node left"), not left empty.
  const std::string all = test::WriteTemp("replay-all.txt", "1 fail 0\n2 fail 1\n3 fail 2\n4 fail 3\n");
  auto [code3, out3] = test::RunLoom(replay + "--systems varuna --hours 1 --failures " + all);
  ASSERT_EQ(code3, 0) << out3;
  EXPECT_NE(out3.find("with 0 nodes: no node left"), std::string::npos) << out3;
}

}  // namespace
}  // namespace loom
