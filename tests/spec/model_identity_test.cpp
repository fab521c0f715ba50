// What a training checkpoint records of its model (spec/model_identity.h):
// the same model under another name or file is the same, a model that
// computes differently (an eps, a width, a layer more, an image token) is
// not, and the difference is said field by field.
#include "loom/spec/model_identity.h"

#include <gtest/gtest.h>

#include <string>

#include "loom/spec/hf_config.h"
#include "loom/spec/model.h"

namespace loom {
namespace {

const char* kLlm = R"(model: NAME
description: 'a small LLM'
modules:
  - name: llm
    role: backbone
    modality: text
    tokens: {source: text}
    layers:
      - {kind: embedding, vocab: 128, hidden: 64}
      - {kind: transformer, count: 4, hidden: 64, ffn_hidden: 128, heads: 4, kv_heads: 2, gated_mlp: true, causal: true}
      - {kind: lm_head, vocab: 128, hidden: 64}
)";

Model Llm(const std::string& name, const std::string& from, const std::string& to, const std::string& file) {
  std::string text = kLlm;
  text.replace(text.find("NAME"), 4, name);
  if (!from.empty()) text.replace(text.find(from), from.size(), to);
  return ParseModel(text, file);
}

TEST(ModelIdentity, TheSameModelUnderAnotherNameOrFileIsTheSame) {
  const Model a = Llm("tiny", "", "", "a/tiny.yaml"), b = Llm("renamed", "", "", "b/other.yaml");
  EXPECT_EQ(ModelIdentity(a), ModelIdentity(b));
  EXPECT_EQ(FirstIdentityDifference(ModelIdentity(a), ModelIdentity(b)), "");
  // A line for the model, one for the module, and one per run of equal
  // layers: the embedding, the four transformer layers, the head.
  const std::vector<std::string> lines = ModelIdentity(a);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[0], "model: ");
  EXPECT_EQ(lines[1], "module llm: role backbone, modality text, layers 6, tokens.source text");
  // Only what differs from a default: LayerNorm, eps 1e-5 and the rest are left
  // out (context_dim is the loader's: the width when not given).
  EXPECT_EQ(lines[3],
            "module llm layers 2-5: kind transformer, hidden 64, ffn_hidden 128, heads 4, kv_heads 2, gated_mlp true, "
            "causal true, context_dim 64");
  EXPECT_EQ(lines[4], "module llm layer 6: kind lm_head, hidden 64, vocab 128");
}

TEST(ModelIdentity, WhatComputesDifferentlyIsNamedFieldByField) {
  const Model base = Llm("tiny", "", "", "tiny.yaml");
  const struct {
    std::string from, to, says;
  } cases[] = {
      // A field one side leaves out is its default there.
      {"causal: true}", "causal: true, norm_eps: 1.0e-6}", "module llm layer 2: norm_eps is 1e-05 there, 1e-06 here"},
      {"causal: true}", "causal: true, norm: rms, activation: gelu}",
       "module llm layer 2: norm is layer there, rms here; activation is default there, gelu here"},
      {"causal: true}", "causal: true, rope_theta: 10000}", "module llm layer 2: rope.theta is 0 there, 10000 here"},
      {"count: 4", "count: 3", "module llm: layers is 6 there, 5 here"},
      {"tokens: {source: text}", "tokens: {source: text, max_tokens: 64}",
       "module llm: tokens.max_tokens is 0 there, 64 here"},
      {"description: 'a small LLM'", "description: 'a small LLM'\nimage_token_id: 100",
       "model: image_token_id is none there, 100 here"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.to);
    const Model other = Llm("tiny", c.from, c.to, "tiny.yaml");
    EXPECT_EQ(FirstIdentityDifference(ModelIdentity(base), ModelIdentity(other)), c.says);
  }
  // One layer of a run changed: said as that layer, not as runs of other lengths.
  Model one = base;
  one.modules[0].layers[2].frozen = true;
  EXPECT_EQ(FirstIdentityDifference(ModelIdentity(base), ModelIdentity(one)),
            "module llm layer 3: frozen is false there, true here");
  // The longest sequence a model takes and where a Hugging Face checkpoint
  // keeps its tensors are not what it trained.
  Model guarded = base;
  guarded.modules[0].weights_prefix = "language_model.";
  for (Layer& l : guarded.modules[0].layers) l.rope.max_positions = 4096;
  EXPECT_EQ(FirstIdentityDifference(ModelIdentity(base), ModelIdentity(guarded)), "");
  // A field a later Loom writes that this one left out reads as its default.
  std::vector<std::string> later = ModelIdentity(base);
  later[3] += ", norm_eps 1e-05";
  EXPECT_EQ(FirstIdentityDifference(ModelIdentity(base), later), "");
}

// A LLaVA's config.json names its image token (LlavaConfig's
// image_token_index, 32000 by default; image_token_id is its alias).
TEST(ModelIdentity, ALlavaConfigNamesItsImageToken) {
  const std::string tiny =
      R"("vision_config": {"model_type": "clip_vision_model", "hidden_size": 32, "intermediate_size": 64,
          "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 32, "patch_size": 8},
          "text_config": {"model_type": "llama", "vocab_size": 128, "hidden_size": 64, "intermediate_size": 96,
          "num_hidden_layers": 2, "num_attention_heads": 4})";
  EXPECT_EQ(ParseModel(R"({"model_type": "llava", )" + tiny + "}", "l/config.json").image_token_id, 32000);
  EXPECT_EQ(
      ParseModel(R"({"model_type": "llava", "image_token_index": 127, )" + tiny + "}", "l/config.json").image_token_id,
      127);
  EXPECT_EQ(
      ParseModel(R"({"model_type": "llava", "image_token_id": 99, )" + tiny + "}", "l/config.json").image_token_id, 99);
  EXPECT_EQ(ParseModel(R"({"model_type": "llama"})", "m/config.json").image_token_id, -1);
}

}  // namespace
}  // namespace loom
