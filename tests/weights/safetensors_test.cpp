// Loom's safetensors reader and writer against the real implementation: the
// `safetensors` package (requirements.txt) writes files Loom reads, reads the
// files Loom writes, and refuses every corrupt file Loom refuses.
#include "loom/weights/safetensors.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "loom/weights/checkpoint_weights.h"
#include "test_util.h"

namespace loom::weights {
namespace {

namespace fs = std::filesystem;

fs::path TempDir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / "loom_tests" / (name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

template <typename T>
std::vector<T> ReadAs(const SafetensorsFile& file, const std::string& name) {
  const TensorInfo& t = file.At(name);
  std::vector<T> out(t.bytes() / sizeof(T));
  file.Read(t, std::as_writable_bytes(std::span(out)));
  return out;
}

float FromBf16(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }
uint16_t ToBf16(float x) { return static_cast<uint16_t>(std::bit_cast<uint32_t>(x) >> 16); }  // exact for our values
float FromF16(uint16_t h) {  // IEEE half, normal numbers and zero (all the test uses)
  const uint32_t sign = (h >> 15) & 1, exponent = (h >> 10) & 31, mantissa = h & 1023;
  if (exponent == 0 && mantissa == 0) return sign ? -0.0f : 0.0f;
  return (sign ? -1.0f : 1.0f) * std::ldexp(1.0f + mantissa / 1024.0f, static_cast<int>(exponent) - 15);
}

TEST(Safetensors, ReadsWhatPythonWrote) {
  const fs::path path = TempDir("st_read") / "python.safetensors";
  const auto [rc, out] = test::RunPython(R"(
import sys, torch
from safetensors.torch import save_file
save_file({
  "f32": torch.arange(24, dtype=torch.float32).reshape(2, 3, 4) * 0.5,
  "bf16": (torch.arange(12, dtype=torch.float32).reshape(3, 4) - 6).to(torch.bfloat16),
  "f16": (torch.arange(6, dtype=torch.float32) * 0.25).to(torch.float16),
  "i64": torch.arange(5, dtype=torch.int64) * 1000000007,
  "u8": torch.arange(7, dtype=torch.uint8),
  "flag": torch.tensor([True, False, True]),
  "scalar": torch.tensor(3.5),
  "empty": torch.zeros(0, 3),
}, sys.argv[1], metadata={"format": "pt", "note": "loom"})
)",
                                        path.string());
  ASSERT_EQ(rc, 0) << out;
  const SafetensorsFile file(path.string());
  EXPECT_EQ(file.layout().tensors.size(), 8u);
  EXPECT_EQ(file.layout().metadata, (std::map<std::string, std::string>{{"format", "pt"}, {"note", "loom"}}));

  EXPECT_EQ(file.At("f32").dtype, DType::kF32);
  EXPECT_EQ(file.At("f32").shape, (std::vector<int64_t>{2, 3, 4}));
  const std::vector<float> f32 = ReadAs<float>(file, "f32");
  ASSERT_EQ(f32.size(), 24u);
  for (int i = 0; i < 24; ++i) EXPECT_EQ(f32[i], 0.5f * i);

  EXPECT_EQ(file.At("bf16").dtype, DType::kBF16);
  const std::vector<uint16_t> bf16 = ReadAs<uint16_t>(file, "bf16");
  for (int i = 0; i < 12; ++i) EXPECT_EQ(FromBf16(bf16[i]), i - 6.0f);
  const std::vector<uint16_t> f16 = ReadAs<uint16_t>(file, "f16");
  for (int i = 0; i < 6; ++i) EXPECT_EQ(FromF16(f16[i]), 0.25f * i);
  const std::vector<int64_t> i64 = ReadAs<int64_t>(file, "i64");
  for (int i = 0; i < 5; ++i) EXPECT_EQ(i64[i], int64_t{1000000007} * i);
  EXPECT_EQ(ReadAs<uint8_t>(file, "u8"), (std::vector<uint8_t>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(file.At("flag").dtype, DType::kBool);
  EXPECT_EQ(ReadAs<uint8_t>(file, "flag"), (std::vector<uint8_t>{1, 0, 1}));
  EXPECT_TRUE(file.At("scalar").shape.empty());
  EXPECT_EQ(ReadAs<float>(file, "scalar"), std::vector<float>{3.5f});
  EXPECT_EQ(file.At("empty").shape, (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(file.At("empty").bytes(), 0u);

  // Slices along each dimension: what a tensor-parallel shard reads.
  const TensorInfo& t = file.At("f32");
  for (int dim = 0; dim < 3; ++dim) {
    const int64_t begin = 1, end = t.shape[dim];
    std::vector<float> slice(24 / t.shape[dim] * (end - begin));
    file.ReadSlice(t, dim, begin, end, std::as_writable_bytes(std::span(slice)));
    size_t k = 0;
    for (int a = 0; a < 2; ++a) {
      for (int b = 0; b < 3; ++b) {
        for (int c = 0; c < 4; ++c) {
          const int index[3] = {a, b, c};
          if (index[dim] < begin) continue;
          ASSERT_LT(k, slice.size());
          EXPECT_EQ(slice[k++], 0.5f * (a * 12 + b * 4 + c)) << "dim " << dim;
        }
      }
    }
    EXPECT_EQ(k, slice.size());
  }
  test::ExpectError([&] { file.At("missing"); }, {"python.safetensors", "no tensor 'missing'"});
}

TEST(Safetensors, PythonReadsWhatLoomWrites) {
  const fs::path path = TempDir("st_write") / "loom.safetensors";
  const std::vector<float> w = {1, 2, 3, 4};
  const std::vector<uint16_t> b = {ToBf16(-1.5f), ToBf16(2.0f), ToBf16(1024.0f)};
  const std::vector<int64_t> n = {-3, int64_t{1} << 40};
  WriteSafetensors(path.string(),
                   {{"layer.w", DType::kF32, {2, 2}, std::as_bytes(std::span(w))},
                    {"layer.b", DType::kBF16, {3}, std::as_bytes(std::span(b))},
                    {"steps", DType::kI64, {2}, std::as_bytes(std::span(n))},
                    {"none", DType::kF32, {0}, {}}},
                   {{"format", "pt"}});
  const auto [rc, out] = test::RunPython(R"(
import json, sys
from safetensors import safe_open
out = {}
with safe_open(sys.argv[1], "pt") as f:
    out["__metadata__"] = f.metadata()
    for k in f.keys():
        t = f.get_tensor(k)
        out[k] = {"dtype": str(t.dtype), "shape": list(t.shape),
                  "values": (t.float() if t.is_floating_point() else t).flatten().tolist()}
print(json.dumps(out))
)",
                                        path.string());
  ASSERT_EQ(rc, 0) << out;
  const nlohmann::json got = nlohmann::json::parse(out);
  EXPECT_EQ(got["__metadata__"], nlohmann::json({{"format", "pt"}}));
  EXPECT_EQ(got["layer.w"]["dtype"], "torch.float32");
  EXPECT_EQ(got["layer.w"]["shape"], nlohmann::json({2, 2}));
  EXPECT_EQ(got["layer.w"]["values"], nlohmann::json({1.0, 2.0, 3.0, 4.0}));
  EXPECT_EQ(got["layer.b"]["dtype"], "torch.bfloat16");
  EXPECT_EQ(got["layer.b"]["values"], nlohmann::json({-1.5, 2.0, 1024.0}));
  EXPECT_EQ(got["steps"]["dtype"], "torch.int64");
  EXPECT_EQ(got["steps"]["values"], nlohmann::json({-3, int64_t{1} << 40}));
  EXPECT_EQ(got["none"]["shape"], nlohmann::json({0}));
  // Laid out as the Rust crate lays them: the 8-byte tensor first, each aligned to its size.
  const SafetensorsFile file(path.string());
  EXPECT_EQ(file.layout().tensors.front().name, "steps");
  EXPECT_EQ(file.layout().data_offset_bytes % 8, 0u);
  for (const TensorInfo& t : file.layout().tensors) EXPECT_EQ(t.begin_byte % DTypeBytes(t.dtype), 0u) << t.name;
}

// A file from its header text and data bytes (no padding, as a corrupt file may be).
std::string Bytes(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

TEST(Safetensors, CorruptFilesAreErrorsAsTheyAreForPython) {
  const fs::path dir = TempDir("st_bad");
  const std::string four_floats(16, '\0');
  struct Case {
    std::string name, bytes;
    std::vector<std::string> fragments;
  };
  std::string huge(8, '\xff');
  std::vector<Case> cases = {
      {"short", std::string(5, '\0'), {"5 bytes", "8-byte header length"}},
      {"huge_header", huge + "{}", {"over the format's 100 MB limit"}},
      {"past_end", Bytes("{}", "").substr(0, 8) + "{", {"runs past the file's"}},
      {"not_object", Bytes("[1,2]   ", ""), {"does not start with '{'"}},
      {"not_json", Bytes("{\"a\":", ""), {"not JSON"}},
      {"duplicate", Bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", four_floats), {"'a' is named twice"}},
      {"dtype", Bytes(R"({"a":{"dtype":"F31","shape":[4],"data_offsets":[0,16]}})", four_floats), {"tensor 'a'", "dtype is 'F31'", "valid: BOOL", "BF16"}},
      {"negative", Bytes(R"({"a":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", four_floats), {"shape[0] is -4"}},
      {"count", Bytes(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", four_floats), {"hold 16 bytes", "of its shape is 12"}},
      {"gap", Bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})", four_floats), {"tensor 'b'", "start at byte 12", "without gaps"}},
      {"overlap", Bytes(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", four_floats), {"tensor 'b'", "start at byte 8", "overlaps"}},
      {"trailing", Bytes(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}})", four_floats), {"end at byte 12", "holds 16 bytes"}},
      {"truncated", Bytes(R"({"a":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}})", four_floats), {"end at byte 32", "holds 16 bytes"}},
      // Runtime audit R4-14: a tensor moved past the data is named, not the one after the gap it leaves.
      {"offsets_past_data", Bytes(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[100,116]},"b":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", four_floats), {"tensor 'a'", "end at byte 116", "holds 16 bytes"}},
      {"metadata", Bytes(R"({"__metadata__":{"step":3}})", ""), {"__metadata__", "'step' is 3", "must be strings"}},
      {"no_offsets", Bytes(R"({"a":{"dtype":"F32","shape":[4]}})", four_floats), {"no 'data_offsets'"}},
      {"field_twice", Bytes(R"({"a":{"dtype":"F32","dtype":"F32","shape":[4],"data_offsets":[0,16]}})", four_floats), {"'dtype' is named twice"}},
      {"deep", Bytes(R"({"a":{"dtype":"F32","shape":)" + std::string(200, '[') + std::string(200, ']') + R"(,"data_offsets":[0,16]}})", four_floats), {"nests deeper than 128 levels"}},
  };
  std::string paths;
  for (const Case& c : cases) {
    const fs::path path = dir / (c.name + ".safetensors");
    std::ofstream(path, std::ios::binary) << c.bytes;
    SCOPED_TRACE(c.name);
    std::vector<std::string> fragments = c.fragments;
    fragments.push_back(path.string());
    test::ExpectError([&] { SafetensorsFile file(path.string()); }, fragments);
    paths += " " + path.string();
  }
  // The real implementation refuses every one of them too.
  const auto [rc, out] = test::RunPython(R"(
import sys
from safetensors import safe_open
for p in sys.argv[1:]:
    try:
        with safe_open(p, "np") as f:
            [f.get_tensor(k) for k in f.keys()]
        print("accepted", p)
    except Exception:
        pass
)",
                                        paths);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "");
  // And both accept the same file made valid, with leading whitespace and null metadata as the crate allows.
  const fs::path good = dir / "good.safetensors";
  std::ofstream(good, std::ios::binary)
      << Bytes(R"( {"__metadata__":null,"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", four_floats);
  EXPECT_EQ(SafetensorsFile(good.string()).At("a").elements(), 4);
  const auto [rc_good, out_good] = test::RunPython(
      "import sys\nfrom safetensors import safe_open\nwith safe_open(sys.argv[1], 'np') as f: print(f.get_tensor('a').size)",
      good.string());
  EXPECT_EQ(out_good, "4\n");
}

TEST(CheckpointWeights, ShardsAsTransformersLaysThemOutAndReadsThemBack) {
  const fs::path dir = TempDir("ckpt_shards");
  std::vector<std::vector<float>> data;
  std::vector<TensorToWrite> tensors;
  for (int i = 0; i < 5; ++i) data.push_back(std::vector<float>(10 + i, static_cast<float>(i)));
  for (int i = 0; i < 5; ++i) {
    tensors.push_back({"model.layers." + std::to_string(i) + ".weight", DType::kF32, {10 + i},
                       std::as_bytes(std::span(data[i]))});
  }
  WriteCheckpointWeights(dir.string(), tensors, /*max_shard_bytes=*/100);  // 40..56 bytes each: two per shard
  EXPECT_TRUE(fs::exists(dir / kIndexFile));
  EXPECT_TRUE(fs::exists(dir / "model-00001-of-00003.safetensors"));
  EXPECT_TRUE(fs::exists(dir / "model-00003-of-00003.safetensors"));
  EXPECT_FALSE(fs::exists(dir / kSingleFile));
  const CheckpointWeights weights(dir.string());
  EXPECT_EQ(weights.Names().size(), 5u);
  const auto& where = weights.At("model.layers.4.weight");
  std::vector<float> back(14);
  where.file->Read(*where.tensor, std::as_writable_bytes(std::span(back)));
  EXPECT_EQ(back, data[4]);
  // The index is what transformers reads: total_size, and each name in its shard.
  const auto [rc, out] = test::RunPython(R"(
import json, os, sys
from safetensors import safe_open
d = sys.argv[1]
index = json.load(open(os.path.join(d, "model.safetensors.index.json")))
total = 0
for name, shard in index["weight_map"].items():
    with safe_open(os.path.join(d, shard), "np") as f:
        t = f.get_tensor(name)
        assert name in f.keys()
        total += t.nbytes
assert total == index["metadata"]["total_size"], (total, index["metadata"])
print(len(index["weight_map"]), len(set(index["weight_map"].values())))
)",
                                        dir.string());
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "5 3\n");

  // A missing shard and a shard outside the folder are named.
  fs::remove(dir / "model-00002-of-00003.safetensors");
  test::ExpectError([&] { CheckpointWeights w(dir.string()); },
                    {"shard model-00002-of-00003.safetensors", "is missing from", dir.string()});
  std::ofstream(dir / kIndexFile) << R"({"weight_map": {"x": "../model.safetensors"}})";
  test::ExpectError([&] { CheckpointWeights w(dir.string()); }, {"'../model.safetensors'", "files in the index's folder"});
  std::ofstream(dir / kIndexFile) << R"({"metadata": {}})";
  test::ExpectError([&] { CheckpointWeights w(dir.string()); }, {kIndexFile, "no \"weight_map\""});
  test::ExpectError([&] { CheckpointWeights w((dir / "nothing").string()); }, {"no weights", kSingleFile});
}

TEST(CheckpointWeights, OneFileWhileTheyFit) {
  const fs::path dir = TempDir("ckpt_single");
  const std::vector<float> a = {1, 2}, b = {3};
  WriteCheckpointWeights(dir.string(), {{"b", DType::kF32, {1}, std::as_bytes(std::span(b))},
                                        {"a", DType::kF32, {2}, std::as_bytes(std::span(a))}},
                         /*max_shard_bytes=*/12);
  EXPECT_TRUE(fs::exists(dir / kSingleFile));
  EXPECT_FALSE(fs::exists(dir / kIndexFile));
  const CheckpointWeights weights(dir.string());
  EXPECT_EQ(weights.Names(), (std::vector<std::string>{"a", "b"}));
  test::ExpectError([&] { weights.At("c"); }, {"no tensor 'c'", "another model's checkpoint"});
  test::ExpectError([&] { WriteSafetensors((dir / "x.safetensors").string(), {{"a", DType::kF32, {3}, std::as_bytes(std::span(a))}}); },
                    {"tensor 'a' has 8 bytes"});
  test::ExpectError([&] { WriteSafetensors((dir / "x.safetensors").string(), {{"a", DType::kF32, {2}, std::as_bytes(std::span(a))}, {"a", DType::kF32, {2}, std::as_bytes(std::span(a))}}); },
                    {"two tensors named 'a'"});
  EXPECT_FALSE(fs::exists(dir / "x.safetensors"));
}

}  // namespace
}  // namespace loom::weights
