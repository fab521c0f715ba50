// Token counting through module DAGs, checked by hand on small samples.
#include <gtest/gtest.h>

#include "loom/cost/token_stats.h"
#include "loom/spec/model.h"

namespace loom {
namespace {

TEST(TokenStats, VitHugeAt224Has257TokensPerImage) {
  Model m = LoadModel("vit-huge");
  Sample s;
  int d = s.AddDoc(0);
  s.images.push_back({1024, 768, d});  // resized to 224 first
  s.images.push_back({224, 224, d});
  TokenStats t = CountModuleTokens(m, s)[0];
  EXPECT_DOUBLE_EQ(t.tokens, 2 * 257);
  EXPECT_DOUBLE_EQ(t.sum_sq, 2 * 257.0 * 257);
  EXPECT_DOUBLE_EQ(t.sequences, 2);
}

TEST(TokenStats, SiglipAt384Has27x27Patches) {
  Model m = LoadModel("siglip");
  Sample s;
  s.images.push_back({640, 480, s.AddDoc(0)});
  EXPECT_DOUBLE_EQ(CountModuleTokens(m, s)[0].tokens, 27 * 27);
}

// A bitfield-masked LLM (Cornstarch) counts the pairs its mask allows, each
// document's images amid its text: the first half of the text reads only
// itself causally, the images read each other, the rest of the text reads
// everything before it. Its attention is priced by them, not by sum_sq.
TEST(TokenStats, BitfieldModulesCountTheirMasksPairs) {
  Model m = LoadModel("vlm-s");
  const int llm = m.FindModule("llm");
  Sample s;
  int d0 = s.AddDoc(100);
  s.images.push_back({768, 768, d0});
  s.AddDoc(50);
  EXPECT_EQ(CountModuleTokens(m, s)[llm].mask_pairs, 0);
  m.modules[llm].bitfield_attention = true;
  const TokenStats t = CountModuleTokens(m, s)[llm];
  auto tri = [](double n) { return n * (n + 1) / 2; };
  const double doc0 = tri(50) + 169.0 * 169 + (50 * 219.0 + tri(50)), doc1 = tri(50);
  EXPECT_DOUBLE_EQ(t.mask_pairs, doc0 + doc1);
  EXPECT_DOUBLE_EQ(t.AttentionPairs(true), doc0 + doc1);
  TokenStats plain = t;
  plain.mask_pairs = 0;
  EXPECT_DOUBLE_EQ(plain.AttentionPairs(true), (269.0 * 269 + 50.0 * 50) / 2);
  EXPECT_DOUBLE_EQ(plain.AttentionPairs(false), 269.0 * 269 + 50.0 * 50);
}

TEST(TokenStats, VlmPacksDocumentsAsSeparateSequences) {
  Model m = LoadModel("vlm-s");
  Sample s;
  int d0 = s.AddDoc(100);
  s.images.push_back({768, 768, d0});
  s.images.push_back({768, 768, d0});
  int d1 = s.AddDoc(50);
  s.images.push_back({768, 768, d1});
  auto t = CountModuleTokens(m, s);
  // ViT: 55 x 55 = 3025 patches per 768 px image at patch 14, one sequence each.
  EXPECT_DOUBLE_EQ(t[0].tokens, 3 * 3025);
  EXPECT_DOUBLE_EQ(t[0].sum_sq, 3 * 3025.0 * 3025);
  // Projector: 169 pooled tokens per image.
  EXPECT_DOUBLE_EQ(t[1].tokens, 3 * 169);
  // LLM: one sequence per document, text + its images' tokens.
  EXPECT_DOUBLE_EQ(t[2].tokens, (100 + 338) + (50 + 169));
  EXPECT_DOUBLE_EQ(t[2].sum_sq, 438.0 * 438 + 219.0 * 219);
  EXPECT_DOUBLE_EQ(t[2].sequences, 2);
}

TEST(TokenStats, MergeShrinksWhatTheProjectorSees) {
  Model m = LoadModel("mllm-sss");
  Sample s;
  int d = s.AddDoc(1024);
  s.images.push_back({1280, 720, d});
  s.audios.push_back({120.0, d});
  auto t = CountModuleTokens(m, s);
  // Resized to the nearest multiple of 28 (patch 14 x merge 2): 1288 x 728 px.
  EXPECT_DOUBLE_EQ(t[m.FindModule("vision")].tokens, 92 * 52);
  EXPECT_DOUBLE_EQ(t[m.FindModule("vision_projector")].tokens, 46 * 26);  // 2x2 merge
  EXPECT_DOUBLE_EQ(t[m.FindModule("audio")].tokens, 120 * 12.5);
  EXPECT_DOUBLE_EQ(t[m.FindModule("llm")].tokens, 1024 + 46 * 26 + 1500);
}

TEST(TokenStats, CrossAttentionPairsEachClipWithItsCaption) {
  Model m = LoadModel("t2v-s");
  Sample s;
  int d0 = s.AddDoc(20);
  s.videos.push_back({16, 512, 512, d0});
  int d1 = s.AddDoc(30);
  s.videos.push_back({32, 512, 512, d1});
  TokenStats dit = CountModuleTokens(m, s)[m.FindModule("dit")];
  // 8x temporal and 16x spatial compression: 2 and 4 latent frames of 32 x 32.
  EXPECT_DOUBLE_EQ(dit.tokens, 2048 + 4096);
  EXPECT_DOUBLE_EQ(dit.context_tokens, 20 + 30);
  EXPECT_DOUBLE_EQ(dit.cross, 2048.0 * 20 + 4096.0 * 30);
}

TEST(TokenStats, StatsAddAcrossSamples) {
  Model m = LoadModel("vlm-s");
  Sample a, b;
  a.images.push_back({768, 768, a.AddDoc(10)});
  b.AddDoc(70);
  auto both = CountModuleTokens(m, std::vector<Sample>{a, b});
  EXPECT_DOUBLE_EQ(both[2].tokens, 10 + 169 + 70);
  EXPECT_DOUBLE_EQ(both[2].sum_sq, 179.0 * 179 + 70.0 * 70);
}

}  // namespace
}  // namespace loom
