// A run's data stream as a checkpoint records it (data/data_identity.h): a
// JSONL file by its bytes (FNV-1a 64, checked against the published test
// vectors), wherever it lies; a synthetic source by its parameters.
#include "loom/data/data_identity.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "loom/spec/workload.h"
#include "test_util.h"

namespace loom {
namespace {

Workload Jsonl(const std::string& path) {
  Workload w;
  w.source.kind = "jsonl";
  w.source.path = path;
  return w;
}

TEST(DataIdentity, AJsonlFileIsItsBytesWhereverItLies) {
  // FNV-1a 64's reference values (Fowler, Noll, Vo's test suite): "" and "a".
  EXPECT_EQ(DataStreamIdentity(Jsonl(test::WriteTemp("id-empty.jsonl", ""))),
            "jsonl: bytes 0, fnv1a64 0xcbf29ce484222325");
  EXPECT_EQ(DataStreamIdentity(Jsonl(test::WriteTemp("id-a.jsonl", "a"))),
            "jsonl: bytes 1, fnv1a64 0xaf63dc4c8601ec8c");
  const std::string line = "{\"input_ids\": [1, 2, 3]}\n";
  const std::string here = DataStreamIdentity(Jsonl(test::WriteTemp("id-here.jsonl", line)));
  EXPECT_EQ(DataStreamIdentity(Jsonl(test::WriteTemp("id-moved.jsonl", line))), here);
  EXPECT_NE(DataStreamIdentity(Jsonl(test::WriteTemp("id-edited.jsonl", "{\"input_ids\": [1, 2, 4]}\n"))), here);
  EXPECT_NE(DataStreamIdentity(Jsonl(test::WriteTemp("id-extended.jsonl", line + line))), here);
  test::ExpectError([] { DataStreamIdentity(Jsonl("/no/such/samples.jsonl")); },
                    {"/no/such/samples.jsonl: cannot be read"});
}

TEST(DataIdentity, ASyntheticSourceIsItsKindAndParameters) {
  const Workload text = LoadWorkload("text");
  EXPECT_EQ(DataStreamIdentity(text).rfind("text: seq_len 2048, ", 0), 0u) << DataStreamIdentity(text);
  Workload shorter = text;
  shorter.source.seq_len = 1024;
  EXPECT_NE(DataStreamIdentity(shorter), DataStreamIdentity(text));
  Workload video = LoadWorkload("video");
  const std::string id = DataStreamIdentity(video);
  video.source.fps = 8;
  EXPECT_NE(DataStreamIdentity(video), id);
  // The seed and the global batch are the manifest's own fields, not this.
  Workload reseeded = text;
  reseeded.seed = 9;
  reseeded.global_batch = 3;
  EXPECT_EQ(DataStreamIdentity(reseeded), DataStreamIdentity(text));
}

}  // namespace
}  // namespace loom
