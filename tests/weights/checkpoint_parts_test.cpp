// Checkpoint parts (`loom run --save`): slices written by several processes
// join into the whole tensor. The expected tensors are built whole first and
// cut by hand (the way TP splits rows and columns), so the join is checked
// against the original, element by element; every inconsistency between
// parts is a named error.
#include "loom/weights/checkpoint_parts.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>

#include "loom/error.h"
#include "loom/weights/checkpoint_weights.h"

namespace loom::weights {
namespace {

namespace fs = std::filesystem;

fs::path PartsDir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / "loom_tests" / (name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// A rows x cols float matrix, element (r, c) = 100 r + c, and its cut along `dim` into `count` slices.
std::vector<float> MatrixOf(int rows, int cols) {
  std::vector<float> m(static_cast<size_t>(rows * cols));
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) m[r * cols + c] = static_cast<float>(100 * r + c);
  }
  return m;
}
std::vector<float> CutSlice(const std::vector<float>& m, int rows, int cols, int dim, int index, int count) {
  std::vector<float> out;
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      const int along = dim == 0 ? r : c;
      const SliceSpan span = SliceSpanOf(dim == 0 ? rows : cols, index, count);
      if (along >= span.begin && along < span.begin + span.length) out.push_back(m[r * cols + c]);
    }
  }
  return out;
}

TensorToWrite F32Tensor(const std::string& name, const std::vector<float>& v, std::vector<int64_t> shape) {
  return {name, DType::kF32, std::move(shape), std::as_bytes(std::span(v))};
}

std::vector<float> ReadFloats(const CheckpointWeights& c, const std::string& name) {
  const auto& where = c.At(name);
  std::vector<float> out(where.tensor->bytes() / sizeof(float));
  where.file->Read(*where.tensor, std::as_writable_bytes(std::span(out)));
  return out;
}

TEST(CheckpointParts, SlicesJoinIntoTheWholeTensorAlongRowsAndColumns) {
  const fs::path dir = PartsDir("parts_join");
  const std::vector<float> q = MatrixOf(6, 4), o = MatrixOf(4, 6), norm = {1, 2, 3, 4};
  // Three TP ranks: q split by rows (column-parallel), o by columns (row-parallel); rank 0 writes the norm.
  std::vector<std::vector<float>> keep;
  for (int rank = 0; rank < 3; ++rank) {
    keep.push_back(CutSlice(q, 6, 4, 0, rank, 3));
    keep.push_back(CutSlice(o, 4, 6, 1, rank, 3));
    std::vector<TensorToWrite> tensors = {F32Tensor("q", keep[keep.size() - 2], {2, 4}),
                                          F32Tensor("o", keep.back(), {4, 2})};
    if (rank == 0) tensors.push_back(F32Tensor("norm", norm, {4}));
    // Parts are named out of rank order: the join orders by slice index.
    WriteCheckpointPart((dir / ("part-" + std::to_string(2 - rank) + ".safetensors")).string(), tensors,
                        {{"q", {0, rank, 3}}, {"o", {1, rank, 3}}});
  }
  std::vector<std::string> parts;
  for (int i = 0; i < 3; ++i) parts.push_back((dir / ("part-" + std::to_string(i) + ".safetensors")).string());
  const fs::path out = dir / "out";
  EXPECT_EQ(AssembleCheckpoint(parts, out.string(), 1 << 20), (std::vector<std::string>{"norm", "o", "q"}));
  const CheckpointWeights c(out.string());
  EXPECT_EQ(c.At("q").tensor->shape, (std::vector<int64_t>{6, 4}));
  EXPECT_EQ(c.At("o").tensor->shape, (std::vector<int64_t>{4, 6}));
  EXPECT_EQ(ReadFloats(c, "q"), q);
  EXPECT_EQ(ReadFloats(c, "o"), o);
  EXPECT_EQ(ReadFloats(c, "norm"), norm);
  EXPECT_TRUE(c.At("q").file->layout().metadata.empty());  // the slice marks stay in the parts
}

// A vocabulary TP does not divide (runtime/torch_model.h TensorParallel):
// slices differing by a row, in SliceSpanOf's order.
TEST(CheckpointParts, UnevenSlicesJoinWhereTheSplitMakesThem) {
  const fs::path dir = PartsDir("parts_uneven");
  const std::vector<float> table = MatrixOf(7, 3), cols = MatrixOf(2, 5);
  std::vector<std::vector<float>> keep;
  std::vector<std::string> parts;
  for (int rank = 0; rank < 3; ++rank) {  // rows 2, 2, 3; columns 1, 2, 2
    keep.push_back(CutSlice(table, 7, 3, 0, rank, 3));
    keep.push_back(CutSlice(cols, 2, 5, 1, rank, 3));
    const int64_t rows = SliceSpanOf(7, rank, 3).length, width = SliceSpanOf(5, rank, 3).length;
    parts.push_back((dir / ("part-" + std::to_string(rank) + ".safetensors")).string());
    WriteCheckpointPart(parts.back(),
                        {F32Tensor("table", keep[keep.size() - 2], {rows, 3}), F32Tensor("c", keep.back(), {2, width})},
                        {{"table", {0, rank, 3}}, {"c", {1, rank, 3}}});
  }
  AssembleCheckpoint(parts, (dir / "out").string(), 1 << 20);
  const CheckpointWeights c((dir / "out").string());
  EXPECT_EQ(c.At("table").tensor->shape, (std::vector<int64_t>{7, 3}));
  EXPECT_EQ(ReadFloats(c, "table"), table);
  EXPECT_EQ(c.At("c").tensor->shape, (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(ReadFloats(c, "c"), cols);
  // Slices of 3 and 1 rows are no split of 4 (2 and 2): named.
  const std::vector<float> three = MatrixOf(3, 2), one = MatrixOf(1, 2);
  const std::string a = (dir / "a.safetensors").string(), b = (dir / "b.safetensors").string();
  WriteCheckpointPart(a, {F32Tensor("w", three, {3, 2})}, {{"w", {0, 0, 2}}});
  WriteCheckpointPart(b, {F32Tensor("w", one, {1, 2})}, {{"w", {0, 1, 2}}});
  try {
    AssembleCheckpoint({a, b}, (dir / "bad").string(), 1 << 20);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a.safetensors: tensor 'w' slice 0/2 has 3 entries along dimension 0; a "
                                         "split of 4 gives it 2"),
              std::string::npos)
        << e.what();
  }
}

TEST(CheckpointParts, InconsistentPartsAreNamedErrors) {
  const fs::path dir = PartsDir("parts_bad");
  const std::vector<float> a = {1, 2, 3, 4}, b = {1, 2, 3, 5};
  const auto part = [&](const std::string& name, const std::vector<TensorToWrite>& t,
                        const std::map<std::string, SliceOf>& s) {
    const std::string path = (dir / name).string();
    WriteCheckpointPart(path, t, s);
    return path;
  };
  const auto fails = [&](const std::vector<std::string>& parts, const std::string& expected) {
    try {
      AssembleCheckpoint(parts, (dir / "out").string(), 1 << 20);
      ADD_FAILURE() << "no error; expected: " << expected;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  };
  const std::string s0 = part("s0.safetensors", {F32Tensor("w", a, {2, 2})}, {{"w", {0, 0, 2}}});
  const std::string s0_again = part("s0b.safetensors", {F32Tensor("w", a, {2, 2})}, {{"w", {0, 0, 2}}});
  const std::string s1_cols = part("s1c.safetensors", {F32Tensor("w", a, {2, 2})}, {{"w", {1, 1, 2}}});
  const std::string s1_wide = part("s1w.safetensors", {F32Tensor("w", {1, 2, 3, 4, 5, 6}, {2, 3})}, {{"w", {0, 1, 2}}});
  const std::string whole = part("whole.safetensors", {F32Tensor("w", a, {2, 2})}, {});
  const std::string copy_a = part("ca.safetensors", {F32Tensor("n", a, {4})}, {});
  const std::string copy_b = part("cb.safetensors", {F32Tensor("n", b, {4})}, {});
  fails({s0}, "tensor 'w': slice 1 of 2 is missing from every part");
  fails({s0, s0_again}, "tensor 'w': slice 0 of 2 is given twice");
  fails({s0, s1_cols}, "split 2 ways along dimension 1, but");
  fails({s0, s1_wide}, "its dtype or shape differs from slice 0's");
  fails({s0, whole}, "tensor 'w' is whole here but a slice in");
  fails({copy_a, copy_b}, "cb.safetensors: tensor 'n' differs from its copy in");
  // A hand-edited part: a slice entry that is not DIM/INDEX/COUNT, or one for a tensor the file lacks.
  WriteSafetensors((dir / "m1.safetensors").string(), {F32Tensor("w", a, {2, 2})}, {{"loom.slice.w", "0/2/2"}});
  fails({(dir / "m1.safetensors").string()}, "slice entry '0/2/2' is not DIM/INDEX/COUNT");
  WriteSafetensors((dir / "m2.safetensors").string(), {F32Tensor("w", a, {2, 2})}, {{"loom.slice.x", "0/0/1"}});
  fails({(dir / "m2.safetensors").string()}, "metadata 'loom.slice.x' marks a tensor the file does not hold");
  // Copies that agree are one tensor.
  EXPECT_EQ(AssembleCheckpoint({copy_a, part("ca2.safetensors", {F32Tensor("n", a, {4})}, {})}, (dir / "ok").string(),
                               1 << 20),
            (std::vector<std::string>{"n"}));
}

// A rewrite in the other layout leaves one set of weights, written before the old one goes.
TEST(CheckpointParts, RewritingAFolderKeepsOneLayout) {
  const fs::path dir = PartsDir("parts_layout");
  const std::vector<float> a(64, 1.0f), b(64, 2.0f);
  WriteCheckpointWeights(dir.string(), {F32Tensor("a", a, {64}), F32Tensor("b", b, {64})}, 300);  // 2 shards
  EXPECT_TRUE(fs::exists(dir / kIndexFile));
  EXPECT_TRUE(fs::exists(dir / "model-00001-of-00002.safetensors"));
  WriteCheckpointWeights(dir.string(), {F32Tensor("a", a, {64}), F32Tensor("b", b, {64})}, 1 << 20);
  EXPECT_TRUE(fs::exists(dir / kSingleFile));
  EXPECT_FALSE(fs::exists(dir / kIndexFile));
  EXPECT_FALSE(fs::exists(dir / "model-00001-of-00002.safetensors"));
  WriteCheckpointWeights(dir.string(), {F32Tensor("a", a, {64}), F32Tensor("b", b, {64})}, 300);
  EXPECT_FALSE(fs::exists(dir / kSingleFile));
  EXPECT_EQ(ReadFloats(CheckpointWeights(dir.string()), "b"), b);
}

}  // namespace
}  // namespace loom::weights
