// The runtime's model pieces in one process: packing worked out by hand,
// what crosses a stage boundary, the zero-bubble split of the backward, and
// recomputation, each against plain autograd on the same layers.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "loom/cost/layer_pricing.h"
#include "loom/cost/layer_work.h"
#include "loom/error.h"
#include "loom/runtime/context_parallel.h"
#include "loom/runtime/packing.h"
#include "loom/runtime/runnable_layers.h"
#include "loom/runtime/torch_model.h"
#include "loom/sim/price_execution.h"
#include "loom/spec/model.h"
#include "test_util.h"

namespace loom {
namespace {

const std::string kVlm = std::string(LOOM_TEST_DATA) + "/runtime/tiny-vlm.yaml";
const std::string kVlm2 = std::string(LOOM_TEST_DATA) + "/runtime/tiny-vlm2.yaml";
const std::string kOmni = std::string(LOOM_TEST_DATA) + "/runtime/tiny-omni.yaml";
const std::string kTextModel = std::string(LOOM_TEST_DATA) + "/runtime/tiny-llm.yaml";

// One sample: document 0 has 5 text tokens and two 32 px images, document 1
// has 3 text tokens and one image; a second sample is one 4-token document.
Batch HandBatch() {
  Batch b;
  Sample s;
  s.AddDoc(5);
  s.AddDoc(3);
  s.images = {{32, 32, 0}, {32, 32, 0}, {32, 32, 1}};
  Sample t;
  t.AddDoc(4);
  b.samples = {s, t};
  return b;
}

TEST(RuntimePacking, FollowsTheTokenRulesByHand) {
  const Model m = LoadModel(kVlm);
  const runtime::MicrobatchPacking p = runtime::PackMicrobatch(m, HandBatch(), std::vector<int>{0, 1});
  // Vision: one sequence per image, (32/8)^2 patches + CLS = 17 tokens.
  EXPECT_EQ(p.Lengths(0), (std::vector<int64_t>{17, 17, 17}));
  EXPECT_EQ(p.Lengths(1), (std::vector<int64_t>{17, 17, 17}));  // the projector keeps them
  // LLM: per document, its images' tokens then its text.
  EXPECT_EQ(p.Lengths(2), (std::vector<int64_t>{17 + 17 + 5, 17 + 3, 4}));
  const auto& doc1 = p.modules[2][1];
  ASSERT_EQ(doc1.parts.size(), 2u);
  EXPECT_EQ(doc1.parts[0].source, 1);
  EXPECT_EQ(doc1.parts[0].offset, 34);  // the third image in the projector's packed output
  EXPECT_EQ(doc1.parts[1].source, -1);
  EXPECT_EQ(p.TextTokens(), 5 + 3 + 4);
  EXPECT_EQ(runtime::BatchTextTokens(HandBatch()), 12);
}

// PipeWeaver's encoder sub-microbatches carry single images: the third image
// of sample 0, then its first. The encoder and projector see those two, in
// that order; the LLM sees nothing of them.
TEST(RuntimePacking, SingleImagePiecesReachOnlyTheImageModules) {
  const Model m = LoadModel(kVlm);
  const runtime::MicrobatchPacking p =
      runtime::PackMicrobatch(m, HandBatch(), std::vector<SamplePiece>{{0, 2}, {0, 0}});
  ASSERT_EQ(p.modules[0].size(), 2u);
  EXPECT_EQ(p.modules[0][0].image, 2);
  EXPECT_EQ(p.modules[0][0].doc, 1);
  EXPECT_EQ(p.modules[0][1].image, 0);
  ASSERT_EQ(p.modules[1].size(), 2u);
  EXPECT_EQ(p.modules[1][0].parts[0].offset, 0);  // no image is taken twice
  EXPECT_EQ(p.modules[1][1].parts[0].offset, 17);
  EXPECT_EQ(p.modules[1][1].image, 0);
  EXPECT_TRUE(p.modules[2].empty());
  EXPECT_THROW(runtime::PackMicrobatch(m, HandBatch(), std::vector<SamplePiece>{{1, 0}}), Error);  // no image
}

TEST(RuntimePacking, BoundariesCarryWhatLaterModulesRead) {
  const Model m = LoadModel(kVlm2);  // vision, coarse, projector, coarse_projector, llm
  auto modules = [&](const LayerRange& r) {
    std::vector<int> out;
    for (const auto& t : runtime::CrossingAfter(m, r)) out.push_back(t.module);
    return out;
  };
  EXPECT_EQ(modules({"vision", 0, 2}), (std::vector<int>{0}));     // inside the first encoder
  EXPECT_EQ(modules({"vision", 0, 3}), (std::vector<int>{0}));     // finished: the projector reads it
  EXPECT_EQ(modules({"coarse", 0, 1}), (std::vector<int>{0, 1}));  // both encoders' tokens ride along
  EXPECT_EQ(modules({"projector", 0, 1}), (std::vector<int>{1, 2}));
  EXPECT_EQ(modules({"coarse_projector", 0, 1}), (std::vector<int>{2, 3}));
  EXPECT_EQ(modules({"llm", 0, 3}), (std::vector<int>{4}));
  EXPECT_EQ(runtime::CrossingAfter(m, {"coarse_projector", 0, 1})[1].width, 64);
}

// Loss and all parameter gradients of tiny-vlm on the hand batch, with each
// layer's recomputation and the backward split or not.
struct Grads {
  double loss = 0;
  std::vector<torch::Tensor> grads;
};

Grads Train(Recompute recompute, bool split) {
  const Model m = LoadModel(kVlm);
  std::vector<LayerRange> all;
  for (const auto& mod : m.modules) all.push_back({mod.name, 0, static_cast<int>(mod.layers.size())});
  runtime::LayerStack stack(m, all, 7);
  const Batch batch = HandBatch();
  const runtime::MicrobatchPacking packing = runtime::PackMicrobatch(m, batch, std::vector<int>{0, 1});
  const runtime::MicrobatchInput mb{&packing, 0, 2};
  int layers = 0;
  for (const auto& mod : m.modules) layers += static_cast<int>(mod.layers.size());
  auto out = stack->forward({}, mb, std::vector<Recompute>(layers, recompute));
  auto loss = runtime::TextLoss(out.at(2), mb, runtime::BatchTextTokens(batch));
  stack->deferral().active = split;
  loss.backward();
  stack->deferral().active = false;
  Grads g;
  g.loss = loss.item<double>();
  if (split) {
    // Only the linear layers' weights wait; their gradients are not there yet.
    EXPECT_FALSE(stack->deferral().pending.empty());
    int undefined = 0;
    for (const auto& p : stack->parameters()) undefined += p.grad().defined() ? 0 : 1;
    std::set<const void*> waiting;  // a weight used several times (per image) waits once per use
    for (const auto& w : stack->deferral().pending) waiting.insert(w.weight.unsafeGetTensorImpl());
    EXPECT_EQ(undefined, static_cast<int>(waiting.size()));
    runtime::ApplyWeightGradients(stack->deferral().pending);
  }
  for (const auto& p : stack->parameters()) g.grads.push_back(p.grad().clone());
  return g;
}

TEST(RuntimeModel, SplitBackwardAndRecomputationGiveAutogradsGradients) {
  const Grads plain = Train(Recompute::kNone, false);
  EXPECT_GT(plain.loss, 0);
  for (auto [recompute, split] : {std::pair{Recompute::kNone, true}, std::pair{Recompute::kSelective, false},
                                  std::pair{Recompute::kFull, false}, std::pair{Recompute::kFull, true}}) {
    SCOPED_TRACE(testing::Message() << "recompute " << static_cast<int>(recompute) << " split " << split);
    const Grads g = Train(recompute, split);
    EXPECT_DOUBLE_EQ(g.loss, plain.loss);
    ASSERT_EQ(g.grads.size(), plain.grads.size());
    for (size_t i = 0; i < g.grads.size(); ++i) {
      ASSERT_TRUE(g.grads[i].defined()) << i;
      EXPECT_TRUE(torch::allclose(g.grads[i], plain.grads[i], 1e-4, 1e-6)) << i;
    }
  }
}

TEST(RuntimeModel, InputsItCannotPackAreErrors) {
  Model m = LoadModel(kVlm);
  m.modules[0].tokens.merge = 2;  // merging 2x2 patches of images that carry a CLS token
  EXPECT_THROW(runtime::PackMicrobatch(m, HandBatch(), std::vector<int>{0}), Error);
  m.modules[0].tokens.merge = 1;
  m.modules[0].tokens.out_tokens_per_image = 4;  // pooling
  EXPECT_THROW(runtime::PackMicrobatch(m, HandBatch(), std::vector<int>{0}), Error);
  m.modules[0].tokens.out_tokens_per_image = 0;
  m.modules[0].tokens.drop_tokens = 17;  // every token of a 16-patch image with its CLS
  EXPECT_THROW(runtime::PackMicrobatch(m, HandBatch(), std::vector<int>{0}), Error);
  EXPECT_THROW(runtime::PackMicrobatch(LoadModel(kVlm), HandBatch(), std::vector<int>{}), Error);
  // Token ids with image tokens, for a model that reads text alone.
  auto tokens = std::make_shared<SampleTokens>();
  tokens->input_ids = tokens->labels = {1, 9, 9, 2};
  tokens->image_token_id = 9;
  tokens->image_runs = {{1, 2}};
  tokens->where = "d.jsonl:3";
  Sample s;
  s.AddDoc(2);
  s.images = {{16, 16, 0}};
  s.tokens = tokens;
  Batch b;
  b.samples = {s};
  test::ExpectError([&] { runtime::PackMicrobatch(LoadModel(kTextModel), b, std::vector<int>{0}); },
                    {"d.jsonl:3: has 1 images, but module llm reads text alone"});
  // Real pixels are patched as they are: 40 x 40 px makes 25 patches of 8 px,
  // where tiny-vlm's vision (resize_px 32) takes 16; said with the sample's
  // line before any worker starts (D40).
  tokens->pixel_values_file = "px.safetensors";
  b.samples[0].images = {{40, 40, 0}};
  test::ExpectError([&] { runtime::PackMicrobatch(LoadModel(kVlm), b, std::vector<int>{0}); },
                    {"d.jsonl:3: pixel_values: px.safetensors: image 0 is 40x40 pixels", "25 patches of 8 px",
                     "module vision takes 16 patches an image: preprocess the images to 32x32"});
  b.samples[0].images = {{32, 32, 0}};  // the right size: on to the image tokens' count
  test::ExpectError([&] { runtime::PackMicrobatch(LoadModel(kVlm), b, std::vector<int>{0}); },
                    {"d.jsonl:3: input_ids: image 0 is 2 image tokens"});
  // Grayscale pixels for an RGB tower: said with the line and file, not by
  // the worker that draws the sample steps later, as "sample 2" (audit R4-05).
  tokens->pixel_channels = 1;
  test::ExpectError([&] { runtime::PackMicrobatch(LoadModel(kVlm), b, std::vector<int>{0}); },
                    {"d.jsonl:3: pixel_values: px.safetensors: 1 channel(s) an image; module vision takes 3"});
}

// Sample 0 of tiny-omni: one document of 20 text tokens, a 32 px image and
// 2 s of audio; sample 1: 12 text tokens, a 4-frame 32 px video and 2.5 s of
// audio; sample 2: 5 text tokens only.
Batch OmniBatch() {
  Batch b;
  Sample s0, s1, s2;
  s0.AddDoc(20);
  s0.images = {{32, 32, 0}};
  s0.audios = {{2.0, 0}};
  s1.AddDoc(12);
  s1.videos = {{4, 32, 32, 0}};
  s1.audios = {{2.5, 0}};
  s2.AddDoc(5);
  b.samples = {s0, s1, s2};
  return b;
}

TEST(RuntimePacking, AudioVideoAndMergedImagesFollowTheTokenRulesByHand) {
  const Model m = LoadModel(kOmni);  // vision, merger, audio, speech, video, llm
  const runtime::MicrobatchPacking p = runtime::PackMicrobatch(m, OmniBatch(), std::vector<int>{0, 1, 2});
  EXPECT_EQ(p.Lengths(0), (std::vector<int64_t>{16}));  // (32 / 8)^2 patches
  EXPECT_EQ(p.Lengths(1), (std::vector<int64_t>{4}));   // merged 2 x 2
  EXPECT_EQ(p.modules[1][0].parts[0].group, 4);
  EXPECT_EQ(p.Lengths(2), (std::vector<int64_t>{8, 10}));  // 4 tokens/s: 2 s, 2.5 s
  EXPECT_EQ(p.Lengths(3), (std::vector<int64_t>{6, 8}));   // 3 tokens/s: 6, ceil(7.5)
  EXPECT_EQ(p.modules[3][1].clip, 0);
  EXPECT_EQ(p.modules[3][1].sample, 1);
  EXPECT_EQ(p.Lengths(4), (std::vector<int64_t>{8}));  // ceil(4 frames / 2) x (32 / 16)^2
  // The LLM: per document, merger, audio, speech and video tokens, then text.
  EXPECT_EQ(p.Lengths(5), (std::vector<int64_t>{4 + 8 + 6 + 20, 10 + 8 + 8 + 12, 5}));
  const auto& doc = p.modules[5][1];
  ASSERT_EQ(doc.parts.size(), 4u);
  EXPECT_EQ(doc.parts[0].source, 2);
  EXPECT_EQ(doc.parts[0].offset, 8);  // the second clip in the audio module's output
  EXPECT_EQ(doc.parts[2].source, 4);
  // A PipeWeaver image piece reaches the image modules only.
  const runtime::MicrobatchPacking piece = runtime::PackMicrobatch(m, OmniBatch(), std::vector<SamplePiece>{{0, 0}});
  EXPECT_EQ(piece.Tokens(0), 16);
  EXPECT_EQ(piece.Tokens(2) + piece.Tokens(3) + piece.Tokens(4) + piece.Tokens(5), 0);
}

// The speech module's conv stem against torch's own conv1d: 2 x 6 frames of
// 8 features (the runtime's synthetic data, torch_model.h), kernel 3, padding
// 1 each side, stride 2, then GELU: 6 tokens of 32.
TEST(RuntimeModel, ConvStemIsTorchsConv1d) {
  const Model m = LoadModel(kOmni);
  runtime::LayerStack stack(m, std::vector<LayerRange>{{"speech", 0, 1}}, 3);
  const Batch batch = OmniBatch();
  const runtime::MicrobatchPacking packing = runtime::PackMicrobatch(m, batch, std::vector<int>{0});
  const runtime::MicrobatchInput mb{&packing, 2, 3};
  const torch::Tensor got = stack->forward({}, mb).at(3);
  ASSERT_EQ(got.sizes(), (std::vector<int64_t>{1, 6, 32}));
  torch::Tensor weight, bias;
  for (const auto& item : stack->named_parameters()) {
    if (item.key().find("weight") != std::string::npos) weight = item.value();
    if (item.key().find("bias") != std::string::npos) bias = item.value();
  }
  const double phase = 1.3 * (13 * (2 * 3 + 0) + 7 * 0);  // iteration 2, batch of 3, sample 0, clip 0
  const torch::Tensor frames = torch::sin(torch::arange(12 * 8, torch::kFloat) * 0.37 + phase).view({12, 8});
  namespace F = torch::nn::functional;
  const torch::Tensor want = torch::gelu(F::conv1d(frames.t().unsqueeze(0), weight.view({32, 8, 3}),
                                                   F::Conv1dFuncOptions().bias(bias).stride(2).padding(1)))
                                 .transpose(1, 2);
  EXPECT_TRUE(torch::allclose(got, want, 1e-5, 1e-6));
}

// Layers the runtime does not build, or widths that do not meet, are errors naming them.
TEST(RuntimeModel, LayersItCannotBuildAreErrorsNamingThem) {
  auto message = [](const Model& m) {
    std::vector<LayerRange> all;
    for (const auto& mod : m.modules) all.push_back({mod.name, 0, static_cast<int>(mod.layers.size())});
    try {
      runtime::CheckRunnable(m, all);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(LoadModel(kOmni)), "no error");
  for (const char* mosaic_model : {"clip-vit-l", "imagebind", "ofasys", "unified-io-2"}) {
    EXPECT_EQ(message(LoadModel(mosaic_model)), "no error") << mosaic_model;
  }
  EXPECT_NE(message(LoadModel("sd-2.1")).find("only 1-d convolutions"), std::string::npos)
      << message(LoadModel("sd-2.1"));
  // Qwen3-VL's four DeepStack mergers feed different LLM layers; in a row they do not chain.
  EXPECT_NE(message(LoadModel("qwen3-vl-8b"))
                .find("merger layer 1 (mlp_projector): reads width 4608 but layer 0 "
                      "hands on width 4096"),
            std::string::npos)
      << message(LoadModel("qwen3-vl-8b"));
  Model m = LoadModel(kOmni);
  m.modules[1].layers[0].in_dim = 16;  // the merger must read 2 x 2 merged rows of 16
  EXPECT_NE(message(m).find("reads width 16 but input module vision hands on width 64 (4 merged tokens)"),
            std::string::npos)
      << message(m);
  m = LoadModel(kOmni);
  m.modules[3].layers[1].stride = 2;  // a second conv may not shorten the sequence
  EXPECT_NE(message(m).find("stride 1, got 2"), std::string::npos) << message(m);
  // Hugging Face families read for planning only (issue 43) are refused by
  // name, and so are their parts in a hand-written YAML.
  const std::string gemma = message(LoadModel(LOOM_TEST_DATA "/hf/gemma-3-4b-it/config.json"));
  EXPECT_NE(gemma.find("model gemma-3-4b-it is read for planning only: Gemma 3's (1 + w) sandwich norms"),
            std::string::npos)
      << gemma;
  Model tiled = LoadModel(LOOM_TEST_DATA "/hf/llava-v1.6-mistral-7b-hf/config.json");
  tiled.planning_only.clear();
  EXPECT_NE(message(tiled).find("vision: the anyres image tiling is priced by the planner but not built yet"),
            std::string::npos)
      << message(tiled);
  Model cross = LoadModel(LOOM_TEST_DATA "/hf/Llama-3.2-11B-Vision-Instruct/config.json");
  cross.planning_only.clear();
  cross.modules[0].tokens.tiling = ImageTiling::kNone;
  EXPECT_NE(message(cross).find("handing on 6 layers' hidden states side by side is not built yet"), std::string::npos)
      << message(cross);
  cross.modules[0].tokens.concat_layers = 1;
  EXPECT_NE(message(cross).find("a one-matrix (linear) projector is not built yet"), std::string::npos)
      << message(cross);
}

// CP rows per rank (runtime/context_parallel.h): zigzag chunks of each
// sequence, or Cornstarch's balanced blocks. Sequences of 300, 100 and 50
// tokens make causal blocks of work 1, 2, 3 | 1 | 1 (128 tokens each); LPT
// over 2 ranks gives each 4: rank 0 the third block of the first sequence
// and the second sequence, rank 1 the rest. Every row lands on one rank.
TEST(ContextParallelRows, ZigzagPerSequenceOrBalancedBlocks) {
  runtime::MicrobatchPacking packing;
  packing.modules.resize(1);
  for (int64_t tokens : {300, 100, 50}) {
    runtime::PackedSequence s;
    s.tokens = tokens;
    packing.modules[0].push_back(s);
  }
  auto range = [](int64_t lo, int64_t hi) {
    std::vector<int64_t> v;
    for (int64_t i = lo; i < hi; ++i) v.push_back(i);
    return v;
  };
  std::vector<int64_t> rank0 = range(256, 400);
  EXPECT_EQ(runtime::ContextRows(packing, 0, 0, 2, CpSplit::kBalanced), rank0);
  std::vector<int64_t> rank1 = range(0, 256);
  for (int64_t r : range(400, 450)) rank1.push_back(r);
  EXPECT_EQ(runtime::ContextRows(packing, 0, 1, 2, CpSplit::kBalanced), rank1);
  // Zigzag: each sequence in 4 chunks, rank 0 the first and the last.
  const auto z0 = runtime::ContextRows(packing, 0, 0, 2), z1 = runtime::ContextRows(packing, 0, 1, 2);
  EXPECT_EQ(z0.size() + z1.size(), 450u);
  EXPECT_EQ(z0.front(), 0);
  EXPECT_EQ(z0[75], 225);  // the first sequence's last chunk [225, 300)
}

// What a TP rank holds of each layer's parameters, as the runtime splits them
// (every tiny model, TP 1 and 2, each rank), against the memory model's
// count (sim/price_execution.h StageParamsOf, cost/layer_work.h
// LayerParamsOnTpRank): the matmuls and vocabularies split, the norms,
// row-parallel biases, position tables, patch embeddings (with a class
// token) and convolutions whole on each rank. LayerParams counts a LayerNorm's scale
// and not its bias (the zoo's stand-in layers default to LayerNorm where the
// Llamas they copy have RMSNorm; docs/cost-model.md): added here by hand. The
// count once divided everything by TP, which put tiny-vlm's first stage at
// TP 2 x PP 2 at 1.10x its predicted peak (its patch embedding alone is
// 13,440 parameters, 16 B each with gradient and AdamW state).
TEST(RuntimeLayers, EachTpRankHoldsTheParametersTheMemoryModelCounts) {
  for (const std::string& path : {kTextModel, kVlm, kOmni}) {
    const Model m = LoadModel(path);
    for (int tp : {1, 2}) {
      for (int rank = 0; rank < tp; ++rank) {
        runtime::TensorParallel group;
        group.rank = rank;
        group.size = tp;
        for (const auto& mod : m.modules) {
          const bool split = SplitsOverTensorParallel(mod, tp);
          const int n = static_cast<int>(mod.layers.size());
          const std::vector<LayerRange> all = {{mod.name, 0, n}};
          runtime::LayerStack stack(m, all, 1, split ? group : runtime::TensorParallel{});
          std::map<std::string, int64_t> held;  // layer name -> parameters
          for (const auto& item : stack->named_parameters()) {
            held[item.key().substr(0, item.key().find('.'))] += item.value().numel();
          }
          for (int li = 0; li < n; ++li) {
            const Layer& l = mod.layers[li];
            ExecStage one;  // the simulator's stage of this layer alone
            one.layers = {{mod.name, li, li + 1}};
            one.tp = tp;
            const StageParams counted = StageParamsOf(m, one);
            double expected = counted.trainable + counted.frozen;
            const double h = static_cast<double>(l.hidden);
            if (l.kind == LayerKind::kTransformer && l.norm == NormKind::kLayerNorm) expected += 2 * h;
            if (l.kind == LayerKind::kLmHead && l.final_norm == NormKind::kLayerNorm) expected += h;
            if (l.kind == LayerKind::kLmHead && l.tied) continue;  // alone it would hold a copy of the embedding
            EXPECT_EQ(static_cast<double>(held[mod.name + "_" + std::to_string(li)]), expected)
                << path << " tp " << tp << " rank " << rank << " " << mod.name << " layer " << li << " ("
                << LayerKindName(l.kind) << ")";
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace loom
