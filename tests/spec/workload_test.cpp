#include <gtest/gtest.h>

#include "loom/spec/workload.h"
#include "test_util.h"

namespace loom {
namespace {

TEST(Workload, NamedWorkloadsCarryTheSeedsDefaults) {
  EXPECT_EQ(LoadWorkload("laion").global_batch, 1920);       // MMScale §7
  EXPECT_EQ(LoadWorkload("mosaic-fixed").global_batch, 32);  // Mosaic §5.1
  EXPECT_EQ(LoadWorkload("cornstarch-synthetic").global_batch, 48);
  EXPECT_EQ(LoadWorkload("cornstarch-synthetic").microbatch_size, 4);
  EXPECT_EQ(LoadWorkload("obelics").source.pack_tokens, 8192);
  EXPECT_EQ(LoadWorkload("obelics").source.image_tokens, 169);
}

TEST(Workload, YamlFileOverridesAndResolvesRelativePaths) {
  std::string path = test::WriteTemp("w.yaml", R"(workload: mine
source: {kind: jsonl, path: samples.jsonl}
global_batch: 64
zero_stage: 2
seed: 7
)");
  Workload w = LoadWorkload(path);
  EXPECT_EQ(w.global_batch, 64);
  EXPECT_EQ(w.zero_stage, 2);
  EXPECT_EQ(w.seed, 7u);
  EXPECT_NE(w.source.path.find("loom_tests/samples.jsonl"), std::string::npos);
  std::string obelics = test::WriteTemp("w2.yaml", "workload: o\nsource: {kind: obelics, pack_tokens: 4096}\n");
  Workload o = LoadWorkload(obelics);
  EXPECT_EQ(o.source.pack_tokens, 4096);
  EXPECT_EQ(o.global_batch, 128);  // the named kind's default
}

TEST(Workload, BadInputIsNamed) {
  std::string kind = test::WriteTemp("w3.yaml", "workload: x\nsource: {kind: imagenet}\n");
  test::ExpectError([&] { LoadWorkload(kind); }, {"w3.yaml:2:", "source.kind", "imagenet", "obelics"});
  std::string zero = test::WriteTemp("w4.yaml", "workload: x\nsource: {kind: text}\nglobal_batch: 0\n");
  test::ExpectError([&] { LoadWorkload(zero); }, {"w4.yaml:3:", "global_batch", "must be > 0"});
  std::string zs = test::WriteTemp("w5.yaml", "workload: x\nsource: {kind: text}\nzero_stage: 4\n");
  test::ExpectError([&] { LoadWorkload(zs); }, {"w5.yaml:3:", "zero_stage", "0, 1, 2 or 3"});
  test::ExpectError([] { LoadWorkload("imagenet"); }, {"unknown workload 'imagenet'", "laion"});
}

// A field its source kind never reads would be ignored without a word: fps
// on images, image sizes on video or text.
TEST(Workload, FieldsTheSourceKindDoesNotReadAreRefused) {
  test::ExpectError([] { ParseWorkload("workload: w\nsource: {kind: laion, fps: 30}\n", "w.yaml"); },
                    {"w.yaml:2:", "source.fps", "the 'laion' source does not read it", "read by the video source"});
  test::ExpectError([] { ParseWorkload("workload: w\nsource: {kind: video, image_px: 64}\n", "w.yaml"); },
                    {"source.image_px", "'video'", "laion, obelics, dynamic-images sources"});
  test::ExpectError([] { ParseWorkload("workload: w\nsource: {kind: text, pack_tokens: 64}\n", "w.yaml"); },
                    {"source.pack_tokens", "'text'"});
  // Each field is still read where its kind reads it.
  EXPECT_EQ(ParseWorkload("workload: w\nsource: {kind: video, fps: 4}\n", "w.yaml").source.fps, 4.0);
  EXPECT_EQ(ParseWorkload("workload: w\nsource: {kind: dynamic-images, image_px: 64}\n", "w.yaml").source.image_px, 64);
  EXPECT_EQ(ParseWorkload("workload: w\nsource: {kind: text, seq_len: 64}\n", "w.yaml").source.seq_len, 64);
}

}  // namespace
}  // namespace loom
