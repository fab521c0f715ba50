// Issue 45, "silent accepts": model and workload files that parse but mean
// something the runtime cannot build were priced by inspect, simulate and
// plan and failed only inside `loom run` with a libtorch trace. Each is now a
// loom::Error at load time naming the file, line and field and what would
// be valid (the learned positions, which depend on the samples, are checked
// before any worker starts). One case per broken file, named after it.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "loom/spec/model.h"
#include "loom/spec/workload.h"
#include "test_util.h"

namespace loom {
namespace {

// tiny-vlm.yaml with `from` replaced by `to` (once), parsed.
Model TinyVlmWith(const std::string& from, const std::string& to) {
  std::ifstream in(std::string(LOOM_TEST_DATA) + "/runtime/tiny-vlm.yaml");
  std::stringstream text;
  text << in.rdbuf();
  std::string yaml = text.str();
  const size_t at = yaml.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) yaml.replace(at, from.size(), to);
  return ParseModel(yaml, "vlm.yaml");
}

TEST(SpecMeaning, PatchSizesOfTheTokenRuleAndThePatchEmbeddingAgree) {
  test::ExpectError([] { TinyVlmWith("patch_px: 8, resize_px", "patch_px: 16, resize_px"); },
                    {"vlm.yaml:7", "tokens.patch_px 16 px per token, but its patch_embed cuts 8 px patches",
                     "valid: patch_px 8"});
}

// A tied head shares its embedding's matrix: the same vocab and width, and an
// embedding in its module to share (a runtime error inside `loom run` before).
TEST(SpecMeaning, ATiedLmHeadIsItsEmbeddingsMatrix) {
  test::ExpectError(
      [] {
        TinyVlmWith("{kind: lm_head, vocab: 128, hidden: 64}", "{kind: lm_head, vocab: 64, hidden: 64, tied: true}");
      },
      {"vlm.yaml:", "module llm: its lm_head is tied, but it is 64 x 64 and the embedding 128 x 64"});
  // Untied, it may score fewer tokens than the embedding reads (Mllama: 8 image tokens more).
  EXPECT_EQ(TinyVlmWith("{kind: lm_head, vocab: 128", "{kind: lm_head, vocab: 120").modules.back().layers.back().vocab,
            120);
  test::ExpectError(
      [] {
        const std::string transformer =
            "      - {kind: transformer, count: 4, hidden: 64, ffn_hidden: 128, heads: 4, kv_heads: 2, gated_mlp: "
            "true, causal: true}\n";
        TinyVlmWith("      - {kind: embedding, vocab: 128, hidden: 64}\n" + transformer +
                        "      - {kind: lm_head, vocab: 128, hidden: 64}",
                    transformer + "      - {kind: lm_head, vocab: 128, hidden: 64, tied: true}");
      },
      {"module llm: its lm_head is tied, but the module has no embedding to share"});
}

// Token rules the second audit found rounded or clamped in silence: a resize
// smaller than a patch, drop_tokens past the tokens an image hands on (17:
// 16 patches and the CLS), a module named twice as an input.
TEST(SpecMeaning, FixedImageTokensAndInputsAreCheckedNotClamped) {
  test::ExpectError([] { TinyVlmWith("resize_px: 32", "resize_px: 4"); },
                    {"vlm.yaml:7:", "tokens.resize_px: 4 px holds no 8-px patch; valid: at least 8"});
  test::ExpectError([] { TinyVlmWith("extra_tokens: 1}", "extra_tokens: 1, drop_tokens: 17}"); },
                    {"tokens.drop_tokens: 17 of the 17 tokens an image hands on: none would be left; valid: 0..16"});
  EXPECT_NO_THROW(TinyVlmWith("extra_tokens: 1}", "extra_tokens: 1, drop_tokens: 16}"));
  test::ExpectError([] { TinyVlmWith("inputs: [vision]", "inputs: [vision, vision]"); },
                    {"vlm.yaml:14:", "modules[1].inputs[1]: module vision is already an input"});
  test::ExpectError([] { TinyVlmWith("model: tiny-vlm", "model: ''"); }, {"vlm.yaml:1:", "model: empty"});
}

TEST(SpecMeaning, AProjectorHandsOnTheWidthOfTheModuleThatSplicesIt) {
  test::ExpectError([] { TinyVlmWith("out_dim: 64", "out_dim: 48"); },
                    {"vlm.yaml:", "module llm splices projector's tokens, whose projector hands on out_dim 48",
                     "llm's first layer is 64 wide; valid: out_dim 64"});
}

TEST(SpecMeaning, SplicedInputsNeedInputs) {
  test::ExpectError([] { TinyVlmWith("    inputs: [projector]\n", ""); },
                    {"vlm.yaml:", "module llm: source 'text+inputs' needs a non-empty `inputs` list",
                     "tokens: {source: text}"});
}

TEST(SpecMeaning, CrossAttentionNeedsSomethingToAttendTo) {
  // Spliced inputs are tokens of the module's own sequence, not a context.
  test::ExpectError(
      [] {
        TinyVlmWith("gated_mlp: true, causal: true}", "gated_mlp: true, causal: true, cross_attention: true}");
      },
      {"module llm: its layers cross-attend, but its inputs are spliced into its tokens"});
  // A module of a larger model that reads nothing.
  test::ExpectError(
      [] { TinyVlmWith("{kind: transformer, count: 4, hidden: 64, ffn_hidden: 128, heads: 4}",
                       "{kind: transformer, count: 4, hidden: 64, ffn_hidden: 128, heads: 4, cross_attention: true}"); },
      {"vlm.yaml:", "module vision: its layers cross-attend, but it has no inputs to attend to"});
  // A lone component (a DiT priced on its own) keeps its context.
  EXPECT_NO_THROW(LoadModel("dit-5b"));
}

TEST(SpecMeaning, ModuleNamesThatTorchRefuses) {
  test::ExpectError([] { TinyVlmWith("name: vision", "name: vision.enc"); },
                    {"vlm.yaml:4", "'vision.enc': a module name must be non-empty and without '.'"});
}

TEST(SpecMeaning, AWorkloadWhoseSamplesWouldAllBeEmpty) {
  test::ExpectError(
      [] {
        ParseWorkload("workload: w\nsource: {kind: laion, pack_tokens: 18, image_tokens: 17, image_px: 32}\n",
                      "w.yaml");
      },
      {"w.yaml:2", "18 tokens cannot hold one image (17 tokens) and the shortest caption (3)",
       "valid: pack_tokens >= 20"});
  EXPECT_NO_THROW(
      ParseWorkload("workload: w\nsource: {kind: laion, pack_tokens: 20, image_tokens: 17, image_px: 32}\n", "w.yaml"));
}

}  // namespace
}  // namespace loom
