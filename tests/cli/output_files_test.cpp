// Rule 4 for every command's outputs (issue 45, "data loss on output"): no
// output may be one of the command's inputs or another output (the input is
// refused before anything runs, and stays byte for byte what it was), and an
// output is replaced atomically: a write that fails leaves the previous file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "loom/atomic_file.h"
#include "test_util.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

std::string Slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Each case names an input as an output; the input must survive unchanged.
TEST(OutputFiles, AnOutputThatIsAnInputIsRefusedAndTheInputKept) {
  const fs::path dir = fs::temp_directory_path() / "loom_tests" / ("outputs_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path model = dir / "model.yaml", plan = dir / "p.json", failures = dir / "failures.txt";
  fs::copy_file(fs::path(LOOM_TEST_DATA) / "runtime" / "tiny-llm.yaml", model);
  auto [code, text] = test::RunLoom("plan --model " + model.string() +
                                    " --cluster h100:1x2 --strategy megatron --iterations 1 --json " + plan.string());
  ASSERT_EQ(code, 0) << text;
  std::ofstream(failures) << "10 fail 0\n";
  const std::string model_text = Slurp(model), plan_text = Slurp(plan);
  const std::string problem = " --model " + model.string() + " --cluster h100:1x2";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"plan" + problem + " --strategy megatron --iterations 1 --json " + model.string(),
       "--json " + model.string() + ": is also --model, an input"},
      {"simulate" + problem + " --plan " + plan.string() + " --trace " + plan.string(),
       "--trace " + plan.string() + ": is also --plan, an input"},
      {"profile --model " + model.string() + " --out " + model.string(),
       "--out " + model.string() + ": is also --model, an input"},
      {"run" + problem + " --plan " + plan.string() + " --trace " + plan.string(),
       "--trace " + plan.string() + ": is also --plan, an input"},
      {"replay --model llama3-8b --cluster h100:4x8 --failures " + failures.string() + " --json " +
           failures.string(),
       "--json " + failures.string() + ": is also --failures, an input"},
      // The same file through another spelling of its path.
      {"plan" + problem + " --strategy megatron --iterations 1 --report " + (dir / "." / "model.yaml").string(),
       "is also --model, an input"},
      // Two outputs into one file.
      {"plan" + problem + " --strategy megatron --iterations 1 --json " + (dir / "x.json").string() + " --trace " +
           (dir / "x.json").string(),
       "name the same file; give each output its own"},
  };
  for (const auto& [args, expected] : cases) {
    SCOPED_TRACE(args);
    auto [rc, out] = test::RunLoom(args);
    EXPECT_EQ(rc, 2) << out;
    EXPECT_NE(out.find(expected), std::string::npos) << out;
  }
  EXPECT_EQ(Slurp(model), model_text);
  EXPECT_EQ(Slurp(plan), plan_text);
  EXPECT_EQ(Slurp(failures), "10 fail 0\n");
  EXPECT_FALSE(fs::exists(dir / "x.json"));
}

// Inputs a flag does not name itself (the audit of 2026-11-28): a file inside
// an input folder, a file an input names (a workload's samples, a JSONL
// line's pixels), the --config file; and a file inside an output folder.
TEST(OutputFiles, FilesInsideOrNamedByInputsAreInputsToo) {
  const fs::path dir = fs::temp_directory_path() / "loom_tests" / ("outputs_named_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "model");
  fs::create_directories(dir / "pixels");
  fs::create_directories(dir / "saved");  // an empty folder --save may fill
  const fs::path config = dir / "model" / "config.json", samples = dir / "s.jsonl", pixels = dir / "pixels" / "p.bin",
                 workload = dir / "w.yaml", flags = dir / "flags.yaml";
  std::ofstream(config) << "{\"model_type\": \"llama\"}\n";
  std::ofstream(samples) << "{\"input_ids\": [1, 4, 2], \"image_token_id\": 4, \"pixel_values\": \"pixels/p.bin\"}\n";
  std::ofstream(pixels) << "pixels";
  std::ofstream(workload) << "workload: w\nsource: {kind: jsonl, path: " << samples.string() << "}\n";
  std::ofstream(flags) << "model: llama3-1b\ncluster: h100:1x8\nstrategy: megatron\niterations: 1\n";
  const std::string plan = "plan --model llama3-1b --cluster h100:1x8 --strategy megatron --iterations 1";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"run --model " + (dir / "model").string() + " --cluster h100:1x1 --steps 1 --metrics " + config.string(),
       "--metrics " + config.string() + ": is a file of --model " + (dir / "model").string()},
      {plan + " --workload " + workload.string() + " --json " + samples.string(),
       "--json " + samples.string() + ": is a file --workload " + workload.string() + " names"},
      {"run --model llama3-1b --cluster h100:1x1 --steps 1 --data " + samples.string() + " --report " +
           pixels.string(),
       "--report " + pixels.string() + ": is a file --data " + samples.string() + " names"},
      {"plan --config " + flags.string() + " --json " + flags.string(), "is also --config, an input"},
      {"run --model llama3-1b --cluster h100:1x1 --steps 1 --save " + (dir / "saved").string() + " --metrics " +
           (dir / "saved" / "model.safetensors").string(),
       "is inside --save " + (dir / "saved").string() + ", which that flag fills"},
      {"run --model llama3-1b --cluster h100:1x1 --steps 1 --save " + (dir / "no" / "such").string(),
       "--save " + (dir / "no" / "such").string() + ": its folder " + (dir / "no").string() + " does not exist"},
  };
  for (const auto& [args, expected] : cases) {
    SCOPED_TRACE(args);
    auto [rc, out] = test::RunLoom(args);
    EXPECT_EQ(rc, 2) << out;
    EXPECT_NE(out.find(expected), std::string::npos) << out;
  }
  EXPECT_EQ(Slurp(config), "{\"model_type\": \"llama\"}\n");
  EXPECT_EQ(Slurp(pixels), "pixels");
  EXPECT_EQ(Slurp(flags), "model: llama3-1b\ncluster: h100:1x8\nstrategy: megatron\niterations: 1\n");
  EXPECT_TRUE(fs::is_empty(dir / "saved"));
  EXPECT_FALSE(fs::exists(dir / "no"));
}

// A model's `from:` files, at any depth, and the files a plan file's recorded
// problem names are inputs too (the second audit: `--trace base.yaml`
// replaced the file `from:` read, `simulate --plan pl.json --trace m.yaml` the
// model the plan recorded; each with exit 0).
TEST(OutputFiles, FromFilesAndAPlansRecordedFilesAreInputs) {
  const fs::path dir = fs::temp_directory_path() / "loom_tests" / ("outputs_from_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string base_text = Slurp(fs::path(LOOM_TEST_DATA) / "runtime" / "tiny-llm.yaml");
  const fs::path base = dir / "base.yaml", middle = dir / "middle.yaml", model = dir / "m.yaml", plan = dir / "pl.json";
  std::ofstream(base) << base_text;
  std::ofstream(middle) << "model: middle\nmodules: [{name: llm, from: ./base.yaml}]\n";
  std::ofstream(model) << "model: m\nmodules: [{name: llm, from: ./middle.yaml}]\n";
  const std::string problem = " --cluster h100:1x2 --global-batch 8 --workload text --seq-len 16";
  auto [code, out] =
      test::RunLoom("plan --model " + model.string() + problem + " --strategy megatron --json " + plan.string());
  ASSERT_EQ(code, 0) << out;
  const std::string sim = "simulate --model " + model.string() + problem + " --tp 1 --pp 1 --dp 2";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {sim + " --trace " + base.string(),
       "--trace " + base.string() + ": is a file --model " + model.string() + " names"},
      {sim + " --export-pytorch-csv " + middle.string(), "is a file --model " + model.string() + " names"},
      {"simulate --plan " + plan.string() + " --trace " + model.string(),
       "--trace " + model.string() + ": is also --model (recorded by --plan " + plan.string() + "), an input"},
      {"simulate --plan " + plan.string() + " --trace " + base.string(),
       "is a file --model (recorded by --plan " + plan.string() + ") " + model.string() + " names"},
  };
  for (const auto& [args, expected] : cases) {
    SCOPED_TRACE(args);
    auto [rc, text] = test::RunLoom(args);
    EXPECT_EQ(rc, 2) << text;
    EXPECT_NE(text.find(expected), std::string::npos) << text;
  }
  EXPECT_EQ(Slurp(base), base_text);
  EXPECT_EQ(Slurp(middle), "model: middle\nmodules: [{name: llm, from: ./base.yaml}]\n");
  EXPECT_EQ(Slurp(model), "model: m\nmodules: [{name: llm, from: ./middle.yaml}]\n");
}

// A write that fails leaves the previous output whole, and no temporary
// file; a link keeps pointing at its file; a stream (/dev/null) is written in
// place, not replaced.
TEST(OutputFiles, AFailedWriteKeepsThePreviousFile) {
  const fs::path dir = fs::temp_directory_path() / "loom_tests" / ("outputs_atomic_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path out = dir / "plans.json";
  WriteFileAtomically(out.string(), "previous\n");
  EXPECT_EQ(Slurp(out), "previous\n");
  // The temporary file's name taken by a folder: the write fails (as a full
  // disk or a crash would, midway), even for root.
  fs::create_directories(TemporaryPathFor(out.string()));
  test::ExpectError([&] { WriteFileAtomically(out.string(), "new\n"); }, {out.string(), "cannot write"});
  EXPECT_EQ(Slurp(out), "previous\n");
  fs::remove(TemporaryPathFor(out.string()));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  // A link to the output: the file is replaced, the link stays a link.
  fs::create_symlink(out, dir / "link.json");
  WriteFileAtomically((dir / "link.json").string(), "through the link\n");
  EXPECT_TRUE(fs::is_symlink(dir / "link.json"));
  EXPECT_EQ(Slurp(out), "through the link\n");
  WriteFileAtomically("/dev/null", "x");
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
  test::ExpectError([&] { WriteFileAtomically(dir.string(), "x"); }, {"is a folder; expected a file name"});
}

}  // namespace
}  // namespace loom
