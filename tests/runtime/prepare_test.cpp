// `loom prepare` as the binary runs it (issue 42): the script it carries
// (python/prepare/loom_prepare.py, whose ids and pixels tests/python/
// test_prepare.py checks against transformers) reads WebDataset shards of the
// shapes dataset with a tiny LLaVA's own tokenizer and image processor, its
// errors keep their exit code 2, and `loom run` trains on what it wrote: the
// loss falls from the untrained model's to the captions' own entropy within
// 200 steps (make demo trains on to where the images are read).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "test_util.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

TEST(Prepare, TheBinaryRunsItsScriptAndWhatItWritesTrains) {
  const fs::path dir = fs::temp_directory_path() / "loom_tests" / ("prepare_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string scripts = std::string(LOOM_SOURCE_DIR) + "/python/prepare/";
  auto [rc, out] =
      test::RunPython("import runpy, sys\nsys.argv = sys.argv[1:]\nrunpy.run_path(sys.argv[0], run_name='__main__')\n",
                      scripts + "make_tiny_llava.py " + (dir / "model").string());
  ASSERT_EQ(rc, 0) << out;
  std::tie(rc, out) = test::RunPython(
      "import runpy, sys\nsys.argv = sys.argv[1:]\nrunpy.run_path(sys.argv[0], run_name='__main__')\n",
      scripts + "make_shapes_dataset.py " + (dir / "shapes").string() + " --count 64 --format wds --shard-size 32");
  ASSERT_EQ(rc, 0) << out;
  const std::string model = (dir / "model").string();
  auto [code, text] =
      test::RunLoom("prepare --model " + model + " --input '" + (dir / "shapes").string() +
                    "/shapes-{000000..000001}.tar' --out " + (dir / "data").string() + " --template caption");
  ASSERT_EQ(code, 0) << text;
  EXPECT_NE(text.find("loom prepare: 64 samples"), std::string::npos) << text;
  std::ifstream lines(dir / "data" / "data.jsonl");
  int samples = 0;
  for (std::string line; std::getline(lines, line);) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_TRUE(fs::exists(dir / "data" / j["pixel_values"].get<std::string>()));
    ++samples;
  }
  EXPECT_EQ(samples, 64);
  // The script's own errors and exit code come through.
  std::tie(code, text) =
      test::RunLoom("prepare --model " + (dir / "nomodel").string() + " --input " +
                    (dir / "shapes" / "shapes-000000.tar").string() + " --out " + (dir / "out2").string());
  EXPECT_EQ(code, 2) << text;
  EXPECT_NE(text.find("loom prepare: error: "), std::string::npos) << text;
  EXPECT_NE(text.find("nomodel"), std::string::npos) << text;
  // Trained on: the untrained model's loss (about ln 44 on its 44 words) falls
  // below 1.3 (a caption's words drawn at random from their choices: 0.95 a
  // scored token).
  std::tie(code, text) = test::RunLoom("run --model " + model + " --data " + (dir / "data" / "data.jsonl").string() +
                                       " --cluster h100:1x2 --dp 2 --global-batch 32 --steps 200 --lr 3e-3 "
                                       "--precision fp32 --json --timeout 60");
  ASSERT_EQ(code, 0) << text;
  const auto j = nlohmann::json::parse(text);
  EXPECT_GT(j["losses"][0].get<double>(), 3.0);
  EXPECT_LT(j["losses"][199].get<double>(), 1.3);
}

}  // namespace
}  // namespace loom
