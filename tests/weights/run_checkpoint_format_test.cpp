// A training checkpoint's manifest and parts as `loom run --resume` reads them
// (weights/run_checkpoint.h): what the runtime writes reads back the same,
// each malformed manifest field is named (fuzz/checkpoint_manifest_fuzzer.cpp
// feeds it the rest), identical whole copies of a tensor (a fault-tolerant
// run's survivors) read as one, and values that are not finite are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include "loom/weights/run_checkpoint.h"
#include "test_util.h"

namespace loom {
namespace {

using namespace loom::weights;

TEST(RunCheckpointManifest, WhatIsWrittenReadsBackTheSame) {
  RunCheckpointManifest m;
  m.steps_done = 7;
  m.model = "tiny-vlm";
  m.seed = std::numeric_limits<uint64_t>::max();  // the largest seed a workload takes
  m.global_batch = 12;
  m.plan = "tp 2 pp 1";
  m.parts = {"part-00000.safetensors", "part-00001.safetensors"};
  m.has_loss_scale = true;
  m.loss_scale = 32768;
  m.growth_tracker = 3;
  m.hysteresis_tracker = 1;
  m.model_identity = {"model: image_token_id none", "module llm: role backbone"};
  m.data_stream = "text: seq_len 32";
  const std::string text = RunCheckpointManifestText(m);
  EXPECT_NE(text.find("\"format\": \"loom-checkpoint-2\""), std::string::npos) << text;
  const RunCheckpointManifest again = ParseRunCheckpointManifest(text, "ckpt/checkpoint.json");
  EXPECT_EQ(again.steps_done, 7);
  EXPECT_EQ(again.model, "tiny-vlm");
  EXPECT_EQ(again.seed, m.seed);
  EXPECT_EQ(again.global_batch, 12);
  EXPECT_EQ(again.plan, m.plan);
  EXPECT_EQ(again.parts, m.parts);
  EXPECT_TRUE(again.has_loss_scale);
  EXPECT_EQ(again.loss_scale, 32768);
  EXPECT_EQ(again.growth_tracker, 3);
  EXPECT_EQ(again.hysteresis_tracker, 1);
  EXPECT_EQ(again.model_identity, m.model_identity);
  EXPECT_EQ(again.data_stream, m.data_stream);
  // A manifest without them (written by hand) reads as one that records neither.
  const RunCheckpointManifest bare =
      ParseRunCheckpointManifest(R"({"format": "loom-checkpoint-2", "model": "m", "seed": 0, "global_batch": 4, )"
                                 R"("steps_done": 1, "parts": ["p"]})",
                                 "ckpt/checkpoint.json");
  EXPECT_TRUE(bare.model_identity.empty());
  EXPECT_TRUE(bare.data_stream.empty());
}

TEST(RunCheckpointManifest, EachMalformedFieldIsNamed) {
  const std::string ok = R"("format": "loom-checkpoint-2", "model": "m", "seed": 0, "global_batch": 4)";
  const struct {
    std::string text, says;
  } cases[] = {
      {"{", "not JSON"},
      {"[]", "expected a JSON object"},
      {R"({"format": "loom-checkpoint-1", "steps_done": 1, "model": "m", "seed": 0, "layers": []})",
       "field format is 'loom-checkpoint-1'; valid: loom-checkpoint-2 (loom-checkpoint-1 is an earlier Loom's"},
      {"{" + ok + R"(, "parts": []})", "field steps_done is missing"},
      {"{" + ok + R"(, "steps_done": -1, "parts": []})", "field steps_done is -1; valid: a whole number from 0"},
      {"{" + ok + R"(, "steps_done": 1.5, "parts": []})", "field steps_done is 1.5"},
      {"{" + ok + R"(, "steps_done": 1, "parts": "part-00000.safetensors"})", "field parts is \"part-00000"},
      {"{" + ok + R"(, "steps_done": 1, "parts": ["../../etc/passwd"]})",
       "parts[0] is \"../../etc/passwd\"; valid: a file name beside the manifest"},
      {"{" + ok + R"(, "steps_done": 1, "parts": [".."]})", "parts[0] is \"..\""},
      {"{" + ok + R"(, "steps_done": 1, "parts": ["a", "a"]})", "parts[1] \"a\" is listed twice"},
      {R"({"format": "loom-checkpoint-2", "model": 5, "seed": 0, "global_batch": 4, "steps_done": 1, "parts": []})",
       "field model is 5; expected a string"},
      {R"({"format": "loom-checkpoint-2", "model": "m", "seed": -3, "global_batch": 4, "steps_done": 1, "parts": []})",
       "field seed is -3; valid: a whole number from 0 to 18446744073709551615"},
      {R"({"format": "loom-checkpoint-2", "model": "m", "seed": 0, "global_batch": 0, "steps_done": 1, "parts": []})",
       "field global_batch is 0; valid: a whole number from 1"},
      {"{" + ok + R"(, "steps_done": 1, "parts": ["p"], "loss_scale": {"scale": 0}})", "field loss_scale is"},
      // Every run writes a part a process (runtime audit R4-15: an empty list
      // was "a checkpoint of another model" later).
      {"{" + ok + R"(, "steps_done": 1, "parts": []})", "field parts is []; expected a list of file names"},
      {"{" + ok + R"(, "steps_done": 1, "parts": ["p"], "model_identity": ["a", 3]})",
       "field model_identity is [\"a\",3]; expected a list of strings"},
      {"{" + ok + R"(, "steps_done": 1, "parts": ["p"], "model_identity": []})", "field model_identity is []"},
      {"{" + ok + R"(, "steps_done": 1, "parts": ["p"], "data_stream": 7})",
       "field data_stream is 7; expected a string"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    test::ExpectError([&] { ParseRunCheckpointManifest(c.text, "ckpt/checkpoint.json"); },
                      {"ckpt/checkpoint.json: ", c.says});
  }
}

// A checkpoint folder of two parts holding `a` and `b` (2 x 3 fp32 each).
std::string TwoPartCheckpoint(const std::string& name, const std::vector<float>& a, const std::vector<float>& b) {
  const std::string dir = test::WriteTemp(name + "-marker", "") + ".d";
  std::filesystem::remove_all(dir);
  const std::string staging = StageRunCheckpoint(dir, 3);
  const std::vector<float>* values[] = {&a, &b};
  RunCheckpointManifest m;
  m.steps_done = 3;
  m.model = "m";
  m.global_batch = 2;
  for (int p = 0; p < 2; ++p) {
    TensorToWrite t;
    t.name = "llm_0.w";
    t.shape = {2, 3};
    t.bytes = std::as_bytes(std::span<const float>(*values[p]));
    WriteSafetensors(staging + "/" + PartFileName(p), {t}, {{StepKey("llm_0.w"), "0"}});
    m.parts.push_back(PartFileName(p));
  }
  CommitRunCheckpoint(staging, dir, m, 0);
  return FindCheckpoint(dir);
}

TEST(RunCheckpointReader, IdenticalWholeCopiesReadAsOne) {
  const std::vector<float> w = {1, 2, 3, 4, 5, 6};
  const RunCheckpointReader reader(TwoPartCheckpoint("ckpt-copies", w, w));
  std::vector<int64_t> shape;
  EXPECT_EQ(reader.Read("llm_0.w", &shape), w);
  EXPECT_EQ(shape, (std::vector<int64_t>{2, 3}));
}

TEST(RunCheckpointReader, ValuesThatAreNotFiniteAreRefusedNamingThePart) {
  const std::vector<float> w = {1, 2, std::nanf(""), 4, 5, 6};
  const std::string folder = TwoPartCheckpoint("ckpt-nan", w, w);
  const RunCheckpointReader reader(folder);
  test::ExpectError([&] { reader.Read("llm_0.w", nullptr); },
                    {folder + "/part-00000.safetensors: tensor 'llm_0.w'", "not finite", "diverged"});
}

}  // namespace
}  // namespace loom
