// Cornstarch Eq. 3.1-3.3: which layers pay backward-data and backward-weight.
#include <gtest/gtest.h>

#include "loom/cost/frozen.h"
#include "loom/spec/model.h"

namespace loom {
namespace {

// The thesis' example (§3.2): frozen encoder, trainable projector, frozen LLM.
TEST(Frozen, TrainableProjectorMakesTheFrozenLlmPayBackwardData) {
  Model m = LoadModel("mllm-sss");
  auto needs = ComputeBackwardNeeds(m);
  for (const char* name : {"vision", "audio"}) {
    for (const auto& n : needs[m.FindModule(name)]) {
      EXPECT_FALSE(n.data) << name;    // nothing trainable before the encoders
      EXPECT_FALSE(n.weight) << name;  // frozen
    }
  }
  for (const char* name : {"vision_projector", "audio_projector"}) {
    const auto& n = needs[m.FindModule(name)];
    ASSERT_EQ(n.size(), 1u);
    EXPECT_TRUE(n[0].weight);
    EXPECT_FALSE(n[0].data);  // strictly-earlier reading of Eq. 3.3 (docs/cost-model.md)
  }
  for (const auto& n : needs[m.FindModule("llm")]) {
    EXPECT_TRUE(n.data);     // the projectors need the gradient through the LLM
    EXPECT_FALSE(n.weight);  // but the LLM's weights are frozen
  }
}

TEST(Frozen, FullyTrainableModelNeedsAllButTheFirstInputGradient) {
  Model m = LoadModel("vlm-s");
  auto needs = ComputeBackwardNeeds(m);
  EXPECT_FALSE(needs[0][0].data);  // the patch embedding's input is pixels
  EXPECT_TRUE(needs[0][1].data);
  for (size_t i = 0; i < needs.size(); ++i) {
    for (const auto& n : needs[i]) {
      EXPECT_TRUE(n.weight);
    }
  }
  EXPECT_TRUE(needs[2][0].data);  // the LLM's embedding sits after trainable modules
}

TEST(Frozen, FrozenPrefixInsideAModule) {
  std::string text = R"(model: partial
modules:
  - name: m
    role: backbone
    modality: text
    tokens: {source: text}
    layers:
      - {kind: transformer, count: 2, hidden: 64, ffn_hidden: 128, heads: 4, frozen: true}
      - {kind: transformer, count: 2, hidden: 64, ffn_hidden: 128, heads: 4}
)";
  auto needs = ComputeBackwardNeeds(ParseModel(text, "partial.yaml"))[0];
  EXPECT_FALSE(needs[0].data || needs[0].weight);
  EXPECT_FALSE(needs[1].data || needs[1].weight);
  EXPECT_FALSE(needs[2].data);  // first trainable layer: nothing before it needs dX
  EXPECT_TRUE(needs[2].weight);
  EXPECT_TRUE(needs[3].data && needs[3].weight);
}

}  // namespace
}  // namespace loom
