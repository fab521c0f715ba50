// Model spec loading: a good file loads with the right structure, and every
// kind of bad input gives a loom::Error naming file, line, field and what
// would be valid.
#include <gtest/gtest.h>

#include "loom/spec/model.h"
#include "test_util.h"

namespace loom {
namespace {

using test::ExpectError;

const char* kGood = R"(model: tiny
modules:
  - name: vis
    role: encoder
    modality: image
    tokens: {source: image, patch_px: 16}
    layers:
      - {kind: patch_embed, patch_px: 16, hidden: 64}
      - {kind: transformer, count: 3, hidden: 64, ffn_hidden: 256, heads: 4}
  - name: lm
    role: backbone
    modality: multimodal
    inputs: [vis]
    tokens: {source: text+inputs}
    layers:
      - {kind: transformer, count: 2, hidden: 64, ffn_hidden: 128, heads: 4, kv_heads: 2, gated_mlp: true}
)";

TEST(ModelSpec, LoadsModulesLayersAndEdges) {
  Model m = ParseModel(kGood, "tiny.yaml");
  ASSERT_EQ(m.modules.size(), 2u);
  EXPECT_EQ(m.modules[0].layers.size(), 4u);  // count: 3 expands
  EXPECT_EQ(m.modules[1].inputs, std::vector<int>{0});
  EXPECT_EQ(m.modules[1].layers[0].kv_heads, 2);
  EXPECT_TRUE(m.modules[1].layers[0].gated_mlp);
}

TEST(ModelSpec, ModulesAreSortedTopologically) {
  std::string text = R"(model: rev
modules:
  - name: lm
    role: backbone
    modality: multimodal
    inputs: [vis]
    tokens: {source: text+inputs}
    layers: [{kind: transformer, hidden: 64, ffn_hidden: 128, heads: 4}]
  - name: vis
    role: encoder
    modality: image
    tokens: {source: image, patch_px: 16}
    layers: [{kind: transformer, hidden: 64, ffn_hidden: 128, heads: 4}]
)";
  Model m = ParseModel(text, "rev.yaml");
  EXPECT_EQ(m.modules[0].name, "vis");
  EXPECT_EQ(m.modules[1].name, "lm");
  EXPECT_EQ(m.modules[1].inputs, std::vector<int>{0});
}

TEST(ModelSpec, MalformedYamlNamesFileAndLine) {
  ExpectError([] { ParseModel("model: x\nmodules: [\n  - {name: a", "bad.yaml"); }, {"bad.yaml:", "malformed YAML"});
}

TEST(ModelSpec, UnknownKeyIsRejectedWithValidKeys) {
  std::string text = kGood;
  text.replace(text.find("ffn_hidden: 256"), 15, "ffn_hiden: 256");
  ExpectError([&] { ParseModel(text, "typo.yaml"); }, {"typo.yaml:9:", "ffn_hidden", "missing"});
  std::string extra = std::string(kGood) + "colour: blue\n";
  ExpectError([&] { ParseModel(extra, "extra.yaml"); }, {"extra.yaml:17:", "colour", "unknown field", "modules"});
}

TEST(ModelSpec, MissingFieldNamesIt) {
  std::string text = kGood;
  text.replace(text.find("    role: encoder\n"), 18, "");
  ExpectError([&] { ParseModel(text, "m.yaml"); }, {"m.yaml:3:", "modules[0].role", "missing"});
}

TEST(ModelSpec, ZeroAndNegativeSizesAreRejected) {
  std::string zero = kGood;
  zero.replace(zero.find("hidden: 64}"), 11, "hidden: 0}");
  ExpectError([&] { ParseModel(zero, "z.yaml"); }, {"z.yaml:8:", "layers[0].hidden", "must be > 0, got 0"});
  std::string neg = kGood;
  neg.replace(neg.find("count: 3"), 8, "count: -3");
  ExpectError([&] { ParseModel(neg, "n.yaml"); }, {"n.yaml:9:", "count", "must be > 0, got -3"});
  std::string frac = kGood;
  frac.replace(frac.find("heads: 4}"), 9, "heads: 2.5}");
  ExpectError([&] { ParseModel(frac, "f.yaml"); }, {"f.yaml:9:", "heads", "positive integer"});
}

TEST(ModelSpec, InconsistentShapesAreRejected) {
  std::string text = kGood;
  text.replace(text.find("heads: 4}"), 9, "heads: 5}");
  ExpectError([&] { ParseModel(text, "h.yaml"); }, {"h.yaml:9:", "heads (5) must divide hidden (64)"});
  std::string kv = kGood;
  kv.replace(kv.find("kv_heads: 2"), 11, "kv_heads: 3");
  ExpectError([&] { ParseModel(kv, "kv.yaml"); }, {"kv.yaml:16:", "kv_heads (3) must divide heads (4)"});
}

TEST(ModelSpec, UnknownEnumValueListsValidOnes) {
  std::string text = kGood;
  text.replace(text.find("role: encoder"), 13, "role: encodr");
  ExpectError([&] { ParseModel(text, "r.yaml"); },
              {"r.yaml:4:", "unknown value 'encodr'", "encoder, projector, backbone, decoder, generator"});
  std::string kind = kGood;
  kind.replace(kind.find("kind: patch_embed"), 17, "kind: patchembed");
  ExpectError([&] { ParseModel(kind, "k.yaml"); }, {"k.yaml:8:", "patchembed", "patch_embed"});
}

TEST(ModelSpec, DanglingEdgeIsRejected) {
  std::string text = kGood;
  text.replace(text.find("inputs: [vis]"), 13, "inputs: [vision]");
  ExpectError([&] { ParseModel(text, "d.yaml"); }, {"d.yaml:13:", "dangling edge", "'vision'", "modules: vis, lm"});
}

TEST(ModelSpec, CycleIsRejected) {
  std::string text = kGood;
  text.replace(text.find("    tokens: {source: image, patch_px: 16}"), 0, "    inputs: [lm]\n");
  ExpectError([&] { ParseModel(text, "c.yaml"); }, {"c.yaml", "cycle", "vis", "lm"});
}

TEST(ModelSpec, UnknownModelNamesTheZoo) {
  ExpectError([] { LoadModel("llama-9000"); }, {"unknown model 'llama-9000'", "llama3-8b", "vlm-s"});
  std::string text = R"(model: x
modules:
  - name: a
    from: no-such-model
)";
  ExpectError([&] { ParseModel(text, "from.yaml"); }, {"from.yaml:4:", "unknown model 'no-such-model'"});
}

TEST(ModelSpec, FromCopiesAModuleAndAllowsOverrides) {
  std::string text = R"(model: x
modules:
  - name: enc
    from: vit-huge
    frozen: true
  - name: lm
    from: llama3-8b
    inputs: [enc]
    tokens: {source: text+inputs}
)";
  Model m = ParseModel(text, "from.yaml");
  EXPECT_TRUE(m.modules[0].frozen);
  EXPECT_TRUE(m.modules[0].layers.back().frozen);
  EXPECT_EQ(m.modules[0].layers.size(), 33u);
  EXPECT_EQ(m.modules[1].tokens.source, TokenSource::kTextAndInputs);
  std::string multi = "model: y\nmodules:\n  - name: a\n    from: vlm-s\n";
  ExpectError([&] { ParseModel(multi, "multi.yaml"); }, {"has 3 modules", "vlm-s/vision"});
  std::string named = "model: y\nmodules:\n  - name: a\n    from: vlm-s/llm\n    tokens: {source: text}\n";
  EXPECT_EQ(ParseModel(named, "named.yaml").modules[0].layers.size(), 34u);
}

TEST(ModelSpec, LoadsFromAFileWithRelativeFrom) {
  std::string base = test::WriteTemp("base_enc.yaml", R"(model: base_enc
modules:
  - name: e
    role: encoder
    modality: audio
    tokens: {source: audio, tokens_per_s: 50}
    layers: [{kind: transformer, hidden: 32, ffn_hidden: 64, heads: 2}]
)");
  std::string top = test::WriteTemp("top.yaml", R"(model: top
modules:
  - name: e2
    from: base_enc.yaml
)");
  Model m = LoadModel(top);
  EXPECT_EQ(m.modules[0].modality, Modality::kAudio);
  EXPECT_EQ(m.source, top);
}

}  // namespace
}  // namespace loom
