// Synthetic sources reproduce the statistics the seeds publish; every source
// is a pure function of (seed, iteration); JSONL files parse with named errors.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <algorithm>
#include <cmath>

#include "loom/data/jsonl_source.h"
#include "loom/data/sample_source.h"
#include "loom/weights/safetensors.h"
#include "test_util.h"

namespace loom {
namespace {

Batch Draw(const std::string& workload, int64_t n, uint64_t seed = 1, int64_t iteration = 0) {
  Workload w = LoadWorkload(workload);
  return MakeSampleSource(w.source)->Draw(n, seed, iteration);
}

bool SameBatch(const Batch& a, const Batch& b) {
  if (a.samples.size() != b.samples.size()) return false;
  for (size_t i = 0; i < a.samples.size(); ++i) {
    const Sample& x = a.samples[i];
    const Sample& y = b.samples[i];
    if (x.doc_text_tokens != y.doc_text_tokens || x.images.size() != y.images.size() ||
        x.videos.size() != y.videos.size()) {
      return false;
    }
    for (size_t v = 0; v < x.videos.size(); ++v) {
      if (x.videos[v].frames != y.videos[v].frames) return false;
    }
  }
  return true;
}

TEST(SampleSource, SameSeedSameBatchOtherSeedOrIterationDiffers) {
  for (const char* w : {"laion", "obelics", "video"}) {
    SCOPED_TRACE(w);
    EXPECT_TRUE(SameBatch(Draw(w, 16, 3, 5), Draw(w, 16, 3, 5)));
    EXPECT_FALSE(SameBatch(Draw(w, 16, 3, 5), Draw(w, 16, 4, 5)));
    EXPECT_FALSE(SameBatch(Draw(w, 16, 3, 5), Draw(w, 16, 3, 6)));
  }
}

TEST(SampleSource, LaionAveragesAbout16TextTokensPerImage) {
  Batch b = Draw("laion", 200);
  double text = 0, images = 0;
  for (const auto& s : b.samples) {
    text += static_cast<double>(s.text_tokens);
    images += static_cast<double>(s.images.size());
    EXPECT_EQ(s.num_docs(), static_cast<int>(s.images.size()));  // one pair per document
    EXPECT_LE(s.text_tokens + 256 * static_cast<int64_t>(s.images.size()), 8192);
  }
  EXPECT_NEAR(text / images, 16.4, 0.8);  // PipeWeaver §8: 16.4 text tokens per image
}

TEST(SampleSource, ObelicsPacksHeavyTailedDocumentsInto8192Tokens) {
  Batch b = Draw("obelics", 300);
  double min_ratio = 1e9, max_ratio = 0;
  for (const auto& s : b.samples) {
    int64_t images = static_cast<int64_t>(s.images.size());
    EXPECT_LE(s.text_tokens + 169 * images, 8192);
    EXPECT_LE(images, 8192 / 169);  // at most 48 images per sequence
    std::vector<int> per_doc(s.num_docs(), 0);
    for (const auto& im : s.images) {
      ASSERT_LT(im.doc, s.num_docs());
      ++per_doc[im.doc];
      EXPECT_EQ(im.width_px, 768);
    }
    for (int d = 0; d < s.num_docs(); ++d) {
      if (per_doc[d] > 0) {
        double r = static_cast<double>(s.doc_text_tokens[d]) / per_doc[d];
        min_ratio = std::min(min_ratio, r);
        max_ratio = std::max(max_ratio, r);
      }
    }
  }
  // The published range is 0.4 to 3115 text tokens per image; the draw spans
  // most of it (heavy tail), never beyond.
  EXPECT_GE(min_ratio, 0.4);
  EXPECT_LE(max_ratio, 3115.0 + 1);
  EXPECT_LT(min_ratio, 20);
  EXPECT_GT(max_ratio, 1500);
}

TEST(SampleSource, VideoGroupsAtMost8ClipsUnder16Seconds) {
  Batch b = Draw("video", 300);
  bool some_multi = false;
  for (const auto& s : b.samples) {
    ASSERT_GE(s.videos.size(), 1u);
    EXPECT_LE(s.videos.size(), 8u);
    int64_t frames = 0;
    for (const auto& v : s.videos) {
      frames += v.frames;
    }
    EXPECT_LE(frames, 16 * 16 + 1);  // 16 s at 16 FPS (rounding of each clip)
    some_multi = some_multi || s.videos.size() > 1;
  }
  EXPECT_TRUE(some_multi);
}

TEST(SampleSource, FixedShapesMatchMosaicAndCornstarch) {
  Sample m = Draw("mosaic-fixed", 1).samples[0];
  EXPECT_EQ(m.text_tokens, 2048);
  EXPECT_EQ(m.images[0].width_px, 512);
  EXPECT_EQ(m.videos[0].frames, 32);
  EXPECT_DOUBLE_EQ(m.audios[0].seconds, 8.0);
  Sample c = Draw("cornstarch-synthetic", 1).samples[0];
  EXPECT_EQ(c.text_tokens, 1024);
  EXPECT_EQ(c.images[0].width_px, 1280);
  EXPECT_EQ(c.images[0].height_px, 720);
  EXPECT_DOUBLE_EQ(c.audios[0].seconds, 120.0);
  Workload t = LoadWorkload("text");
  t.source.seq_len = 4096;
  EXPECT_EQ(MakeSampleSource(t.source)->Draw(1, 0, 0).samples[0].text_tokens, 4096);
}

TEST(JsonlSource, ParsesDocumentsAndPermutesEachEpoch) {
  std::string path = test::WriteTemp("s.jsonl",
                                     "{\"text_tokens\": 10, \"images\": [[768, 512]]}\n"
                                     "\n"
                                     "{\"docs\": [{\"text_tokens\": 5}, {\"text_tokens\": 7, \"audio_s\": [2.5]}]}\n"
                                     "{\"text_tokens\": 3, \"videos\": [[32, 256, 256]]}\n");
  JsonlSource src(path);
  ASSERT_EQ(src.samples().size(), 3u);
  EXPECT_EQ(src.samples()[0].images[0].height_px, 512);
  EXPECT_EQ(src.samples()[1].num_docs(), 2);
  EXPECT_EQ(src.samples()[1].text_tokens, 12);
  EXPECT_EQ(src.samples()[1].audios[0].doc, 1);
  // Iterations of 3 samples walk whole epochs: each batch is a permutation of the file.
  for (int64_t it = 0; it < 4; ++it) {
    Batch b = src.Draw(3, 11, it);
    std::vector<int64_t> texts;
    for (const auto& s : b.samples) texts.push_back(s.text_tokens);
    std::sort(texts.begin(), texts.end());
    EXPECT_EQ(texts, (std::vector<int64_t>{3, 10, 12}));
  }
  EXPECT_TRUE(SameBatch(src.Draw(3, 11, 2), src.Draw(3, 11, 2)));
}

TEST(JsonlSource, BadLinesAreNamed) {
  test::ExpectError([] { JsonlSource(test::WriteTemp("b1.jsonl", "{\"text_tokens\": 1}\n{oops\n")); },
                    {"b1.jsonl:2:", "malformed JSON"});
  test::ExpectError([] { JsonlSource(test::WriteTemp("b2.jsonl", "{\"text_tokens\": -4}\n")); },
                    {"b2.jsonl:1:", "text_tokens", ">= 0"});
  test::ExpectError([] { JsonlSource(test::WriteTemp("b3.jsonl", "{\"images\": [[0, 5]]}\n")); },
                    {"b3.jsonl:1:", "images[0][0]", "> 0"});
  test::ExpectError([] { JsonlSource(test::WriteTemp("b4.jsonl", "{\"txt\": 5}\n")); },
                    {"b4.jsonl:1:", "txt", "unknown field"});
  test::ExpectError([] { JsonlSource(test::WriteTemp("b5.jsonl", "\n")); }, {"no samples"});
  // Found by fuzz/jsonl_fuzzer.cpp: a document that is not an object, a number past a double.
  test::ExpectError([] { ParseJsonlSample("{\"docs\": [{\"text_tokens\": 3}, 5]}", "f.jsonl:7"); },
                    {"f.jsonl:7:", "docs[1]: expected a document object", "got 5"});
  test::ExpectError([] { ParseJsonlSample("{\"text_tokens\": 1e999}", "f.jsonl:8"); },
                    {"f.jsonl:8:", "malformed JSON"});
  test::ExpectError([] { ParseJsonlSample("{\"images\": 3}", "f.jsonl:9"); },
                    {"f.jsonl:9:", "images: expected a list [[width_px, height_px], ...], got 3"});
  test::ExpectError([] { ParseJsonlSample("{\"audio_s\": {\"a\": 1}}", "f.jsonl:9"); },
                    {"f.jsonl:9:", "audio_s: expected a list"});
  test::ExpectError([] { JsonlSource("/nonexistent/x.jsonl"); },
                    {"/nonexistent/x.jsonl: no such file; expected a JSONL sample file"});
  // Issue 20: sizes no real sample has (5e15 tokens from one image) are named, not accepted.
  test::ExpectError([] { JsonlSource(test::WriteTemp("b6.jsonl", "{\"images\": [[1000000000, 1000000000]]}\n")); },
                    {"b6.jsonl:1:", "images[0][0]", "at most 65536"});
  test::ExpectError([] { JsonlSource(test::WriteTemp("b7.jsonl", "{\"text_tokens\": 1000000000000}\n")); },
                    {"b7.jsonl:1:", "text_tokens", "at most 16777216"});
  test::ExpectError([] { JsonlSource(test::WriteTemp("b8.jsonl", "{\"videos\": [[1000000000, 64, 64]]}\n")); },
                    {"b8.jsonl:1:", "videos[0][0]", "at most 100000"});
  test::ExpectError([] { JsonlSource(test::WriteTemp("b9.jsonl", "{\"audio_s\": [1e300]}\n")); },
                    {"b9.jsonl:1:", "audio_s[0]", "at most 86400"});
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// A JSONL source of tokenized samples keeps each one's lengths and scored
// count, not its ids (no process holds a dataset's ids); LoadTokenIds reads
// a sample's line again, by its byte offset, and finds a changed file out.
TEST(JsonlSource, KeepsNoTokenIdsAndLoadsThemBackByOffset) {
  const std::string path =
      test::WriteTemp("ids_" + std::to_string(::getpid()) + ".jsonl",
                      "{\"input_ids\": [5, 6, 7], \"labels\": [-100, 6, 7]}\n\n{\"input_ids\": [9, 8, 7, 6]}\n");
  const JsonlSource source(path);
  ASSERT_EQ(source.samples().size(), 2u);
  const SampleTokens& second = *source.samples()[1].tokens;
  EXPECT_FALSE(second.has_ids);
  EXPECT_TRUE(second.input_ids.empty());
  EXPECT_EQ(second.length, 4);
  EXPECT_EQ(second.scored, 3);  // labels[1:], none -100
  EXPECT_EQ(source.samples()[0].tokens->scored, 2);
  EXPECT_EQ(second.offset, 50);  // after the first line (48 bytes and its newline) and the blank one
  const auto loaded = LoadTokenIds(second);
  EXPECT_TRUE(loaded->has_ids);
  EXPECT_EQ(loaded->input_ids, (std::vector<int64_t>{9, 8, 7, 6}));
  EXPECT_EQ(loaded->labels, loaded->input_ids);
  EXPECT_EQ(loaded->where, path + ":3");
  EXPECT_EQ(LoadTokenIds(*source.samples()[0].tokens)->labels, (std::vector<int64_t>{-100, 6, 7}));
  std::ofstream(path) << "{\"input_ids\": [5, 6, 7], \"labels\": [-100, 6, 7]}\n\n{\"input_ids\": [9, 8]}\n";
  test::ExpectError([&] { LoadTokenIds(second); }, {path + ":3: the line changed since the run started"});
}

// Tokenized samples (`loom run --data`): one document of len(input_ids) text
// tokens, the ids and labels kept; what is not read yet is refused by name.
TEST(JsonlSource, TokenizedSamplesKeepTheirIdsAndLabels) {
  const Sample s = ParseJsonlSample(R"({"input_ids": [5, 6, 7], "labels": [-100, 6, 7]})", "d.jsonl:3");
  EXPECT_EQ(s.text_tokens, 3);
  EXPECT_EQ(s.doc_text_tokens, std::vector<int64_t>{3});
  ASSERT_TRUE(s.tokens);
  EXPECT_EQ(s.tokens->input_ids, (std::vector<int64_t>{5, 6, 7}));
  EXPECT_EQ(s.tokens->labels, (std::vector<int64_t>{-100, 6, 7}));
  EXPECT_EQ(s.tokens->where, "d.jsonl:3");
  EXPECT_EQ(ParseJsonlSample(R"({"input_ids": [1, 2]})", "x").tokens->labels, (std::vector<int64_t>{1, 2}));
  EXPECT_FALSE(ParseJsonlSample(R"({"text_tokens": 4})", "x").tokens);
  test::ExpectError([] { ParseJsonlSample(R"({"input_ids": [1, -100]})", "d.jsonl:1"); },
                    {"d.jsonl:1: input_ids[1]: expected a token id from 0 to 2147483647, got -100"});
  test::ExpectError([] { ParseJsonlSample(R"({"input_ids": [1], "labels": [-5]})", "d.jsonl:1"); },
                    {"labels[0]", "or -100 (not scored)"});
  test::ExpectError([] { ParseJsonlSample(R"({"input_ids": []})", "d.jsonl:2"); },
                    {"d.jsonl:2: input_ids: expected a non-empty list"});
  test::ExpectError([] { ParseJsonlSample(R"({"input_ids": [1], "images": ["a.png"]})", "d.jsonl:4"); },
                    {"d.jsonl:4: images: not read beside input_ids"});
}

// Token ids with images: each run of image_token_id is one image (not text),
// the pixel_values file's header gives their sizes, its path relative to the
// JSONL file's folder; a mismatch names the line and the field.
TEST(JsonlSource, TokenizedSamplesWithImagesFindTheirImageTokens) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / "loom_tests" / ("jsonl_images_" + std::to_string(::getpid()))).string();
  std::filesystem::create_directories(dir);
  const std::vector<float> values(2 * 3 * 4 * 6, 0.5f);
  weights::WriteSafetensors(
      dir + "/two.safetensors",
      {{"pixel_values", weights::DType::kF32, {2, 3, 4, 6}, std::as_bytes(std::span<const float>(values))}});
  const Sample s = ParseJsonlSample(
      R"({"input_ids": [1, 9, 9, 9, 2, 3, 9, 9, 9], "image_token_id": 9, "pixel_values": "two.safetensors"})",
      "d.jsonl:5", dir);
  EXPECT_EQ(s.doc_text_tokens, std::vector<int64_t>{3});  // 9 ids, 6 of them image tokens
  ASSERT_EQ(s.images.size(), 2u);
  EXPECT_EQ(s.images[1].width_px, 6);
  EXPECT_EQ(s.images[1].height_px, 4);
  EXPECT_EQ(s.tokens->image_runs, (std::vector<std::pair<int64_t, int64_t>>{{1, 3}, {6, 3}}));
  EXPECT_EQ(s.tokens->pixel_values_file, dir + "/two.safetensors");
  test::ExpectError(
      [&] {
        ParseJsonlSample(R"({"input_ids": [9, 2], "image_token_id": 9, "pixel_values": "two.safetensors"})",
                         "d.jsonl:6", dir);
      },
      {"d.jsonl:6: pixel_values:", "first 2", "of 1 images, one per run of image_token_id 9"});
  test::ExpectError([&] { ParseJsonlSample(R"({"input_ids": [9, 2], "image_token_id": 9})", "d.jsonl:7", dir); },
                    {"d.jsonl:7: pixel_values: give image_token_id and pixel_values together"});
  test::ExpectError(
      [&] {
        ParseJsonlSample(R"({"input_ids": [9], "image_token_id": 9, "pixel_values": "none.safetensors"})", "d.jsonl:8",
                         dir);
      },
      {"none.safetensors"});
  // Pixels in a dtype the runtime does not read failed in the worker that drew
  // the sample, steps later (runtime audit R4-05): now at the line.
  const std::vector<double> wide(3 * 4 * 6, 0.5);
  weights::WriteSafetensors(
      dir + "/f64.safetensors",
      {{"pixel_values", weights::DType::kF64, {1, 3, 4, 6}, std::as_bytes(std::span<const double>(wide))}});
  test::ExpectError(
      [&] {
        ParseJsonlSample(R"({"input_ids": [9, 2], "image_token_id": 9, "pixel_values": "f64.safetensors"})",
                         "d.jsonl:11", dir);
      },
      {"d.jsonl:11: pixel_values:", "f64.safetensors holds 'pixel_values' as F64; expected F32, BF16 or F16"});
  EXPECT_EQ(s.tokens->pixel_channels, 3);
  // A pipe where a pixel file belongs blocked the launcher in open() (R4-03).
  std::filesystem::remove(dir + "/fifo.safetensors");
  ASSERT_EQ(::mkfifo((dir + "/fifo.safetensors").c_str(), 0600), 0);
  test::ExpectError(
      [&] {
        ParseJsonlSample(R"({"input_ids": [9, 2], "image_token_id": 9, "pixel_values": "fifo.safetensors"})",
                         "d.jsonl:12", dir);
      },
      {"fifo.safetensors: a pipe (FIFO); expected a safetensors file"});
  // A tokenized sample's other fields without its ids: input_ids is what is
  // missing (it was read as a sample shape: "image_token_id: unknown field").
  // A key given twice was last-wins in silence (second audit W039).
  test::ExpectError([&] { ParseJsonlSample(R"({"text_tokens": 5, "text_tokens": 7})", "d.jsonl:10", dir); },
                    {"d.jsonl:10: text_tokens: given twice in one object"});
  test::ExpectError([&] { ParseJsonlSample(R"({"labels": [1, 2], "image_token_id": 9})", "d.jsonl:9", dir); },
                    {"d.jsonl:9: input_ids: missing; a tokenized sample (this line has labels)"});
}

}  // namespace
}  // namespace loom
