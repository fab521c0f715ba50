// End-to-end: `loom replay` prints the comparison, writes the SVG plot and
// the JSON, and rejects bad input with exit code 2.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

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

}  // namespace
}  // namespace loom
