// checkpoint.json as `loom run --resume` reads it (weights/checkpoint_manifest.h):
// what the runtime writes reads back the same, and each malformed field is
// named (issue 45; fuzz/checkpoint_manifest_fuzzer.cpp feeds it the rest).
#include "loom/weights/checkpoint_manifest.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace loom {
namespace {

TEST(CheckpointManifest, WhatIsWrittenReadsBackTheSame) {
  CheckpointManifest m;
  m.steps_done = 7;
  m.model = "tiny-vlm";
  m.seed = 18446744073709551615ull;  // the largest seed a workload takes
  m.layers = {"llm_0", "llm_1", "vision_0"};
  m.outcome = "stopped: 2 of 3 nodes lost";
  const std::string text = CheckpointManifestText(m);
  EXPECT_NE(text.find("\"format\": \"loom-checkpoint-1\""), std::string::npos) << text;
  const CheckpointManifest again = ParseCheckpointManifest(text, "ckpt/checkpoint.json");
  EXPECT_EQ(again.steps_done, 7);
  EXPECT_EQ(again.model, "tiny-vlm");
  EXPECT_EQ(again.seed, m.seed);
  EXPECT_EQ(again.layers, m.layers);
  EXPECT_EQ(again.outcome, m.outcome);
}

TEST(CheckpointManifest, EachMalformedFieldIsNamed) {
  const std::string ok = R"("format": "loom-checkpoint-1", "model": "m", "seed": 0)";
  const struct {
    std::string text, says;
  } cases[] = {
      {"{", "ckpt/checkpoint.json: not JSON"},
      {"[]", "expected a JSON object"},
      {R"({"format": "loom-checkpoint-2", "steps_done": 1, "model": "m", "seed": 0, "layers": []})",
       "field format is 'loom-checkpoint-2'; valid: loom-checkpoint-1"},
      {"{" + ok + R"(, "layers": []})", "field steps_done is missing"},
      {"{" + ok + R"(, "steps_done": -1, "layers": []})",
       "field steps_done is -1; valid: a whole number of steps >= 0"},
      {"{" + ok + R"(, "steps_done": 1.5, "layers": []})", "field steps_done is 1.5"},
      {"{" + ok + R"(, "steps_done": 1, "layers": "llm_0"})", "field layers is \"llm_0\"; expected a list of names"},
      {"{" + ok + R"(, "steps_done": 1, "layers": ["../../etc/passwd"]})",
       "layers[0] is \"../../etc/passwd\"; valid: a layer's file name"},
      {"{" + ok + R"(, "steps_done": 1, "layers": [".."]})", "layers[0] is \"..\""},
      {"{" + ok + R"(, "steps_done": 1, "layers": [3]})", "layers[0] is 3"},
      {"{" + ok + R"(, "steps_done": 1, "layers": ["llm_0", "llm_0"]})", "layers[1] \"llm_0\" is listed twice"},
      {R"({"format": "loom-checkpoint-1", "model": 5, "seed": 0, "steps_done": 1, "layers": []})",
       "field model is 5; expected a string"},
      {R"({"format": "loom-checkpoint-1", "model": "m", "seed": -3, "steps_done": 1, "layers": []})",
       "field seed is -3; valid: a whole number >= 0"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    test::ExpectError([&] { ParseCheckpointManifest(c.text, "ckpt/checkpoint.json"); },
                      {"ckpt/checkpoint.json: ", c.says});
  }
}

}  // namespace
}  // namespace loom
