// Hugging Face config.json files as models (issue 22): configs written here
// in the shape the published models ship (fields as on the Hub; no
// download), loaded as any MODEL is, and their parameter counts checked
// against the counts the model cards publish. Loom counts no biases or norm
// weights, so it may fall short by a little: 0.5% is the bar.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "loom/cost/layer_work.h"
#include "loom/cost/token_stats.h"
#include "loom/data/sample_source.h"
#include "loom/spec/hf_config.h"
#include "loom/spec/model.h"
#include "test_util.h"

namespace loom {
namespace {

int64_t Params(const Model& m) {
  int64_t n = 0;
  for (const auto& mod : m.modules) {
    for (const auto& l : mod.layers) n += LayerParams(l);
  }
  return n;
}

std::string WriteConfig(const std::string& folder, const std::string& json) {
  const auto dir = std::filesystem::temp_directory_path() / "loom_tests" / "hf" / folder;
  std::filesystem::create_directories(dir);
  return test::WriteTemp("hf/" + folder + "/config.json", json);
}

struct Published {
  const char* folder;
  const char* json;
  double params;  // the model card's count
  std::vector<std::string> modules;
};

const std::vector<Published>& Models() {
  static const std::vector<Published> m = {
      {"Meta-Llama-3-8B",
       R"({"architectures": ["LlamaForCausalLM"], "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu",
           "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 8192,
           "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
           "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": null, "rope_theta": 500000.0,
           "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_cache": true, "vocab_size": 128256})",
       8.03e9,
       {"llm"}},
      {"Mistral-7B-v0.1",
       R"({"architectures": ["MistralForCausalLM"], "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
           "max_position_embeddings": 32768, "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 32,
           "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
           "tie_word_embeddings": false, "torch_dtype": "bfloat16", "vocab_size": 32000})",
       7.24e9,
       {"llm"}},
      {"Qwen2-0.5B",
       R"({"architectures": ["Qwen2ForCausalLM"], "hidden_act": "silu", "hidden_size": 896, "intermediate_size": 4864,
           "max_position_embeddings": 131072, "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24,
           "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "tie_word_embeddings": true,
           "torch_dtype": "bfloat16", "vocab_size": 151936})",
       0.494e9,
       {"llm"}},
      {"clip-vit-large-patch14",
       R"({"architectures": ["CLIPModel"], "model_type": "clip", "projection_dim": 768,
           "text_config": {"hidden_size": 768, "intermediate_size": 3072, "max_position_embeddings": 77,
                           "num_attention_heads": 12, "num_hidden_layers": 12, "vocab_size": 49408, "projection_dim": 768},
           "vision_config": {"hidden_size": 1024, "image_size": 224, "intermediate_size": 4096, "num_attention_heads": 16,
                             "num_hidden_layers": 24, "patch_size": 14, "projection_dim": 768}})",
       0.428e9,
       {"vision", "text"}},
      {"siglip-so400m-patch14-384-vision",
       R"({"model_type": "siglip_vision_model", "hidden_size": 1152, "image_size": 384, "intermediate_size": 4304,
           "num_attention_heads": 16, "num_hidden_layers": 27, "patch_size": 14})",
       0.428e9,
       {"vision"}},
      {"whisper-large-v3",
       R"({"architectures": ["WhisperForConditionalGeneration"], "d_model": 1280, "decoder_attention_heads": 20,
           "decoder_ffn_dim": 5120, "decoder_layers": 32, "encoder_attention_heads": 20, "encoder_ffn_dim": 5120,
           "encoder_layers": 32, "max_source_positions": 1500, "max_target_positions": 448, "model_type": "whisper",
           "num_mel_bins": 128, "vocab_size": 51866})",
       0.635e9,
       {"audio"}},  // the encoder's share of the 1.55B
      {"llava-1.5-7b-hf",
       R"({"architectures": ["LlavaForConditionalGeneration"], "ignore_index": -100, "image_token_index": 32000,
           "model_type": "llava", "pad_token_id": 32001, "projector_hidden_act": "gelu",
           "text_config": {"_name_or_path": "lmsys/vicuna-7b-v1.5", "architectures": ["LlamaForCausalLM"],
                           "max_position_embeddings": 4096, "model_type": "llama", "rms_norm_eps": 1e-05,
                           "torch_dtype": "float16", "vocab_size": 32064},
           "tie_word_embeddings": false, "torch_dtype": "float16",
           "vision_config": {"hidden_size": 1024, "image_size": 336, "intermediate_size": 4096,
                             "model_type": "clip_vision_model", "num_attention_heads": 16, "num_hidden_layers": 24,
                             "patch_size": 14, "projection_dim": 768, "vocab_size": 32000},
           "vision_feature_layer": -2, "vision_feature_select_strategy": "default", "vocab_size": 32064})",
       7.06e9,
       {"vision", "projector", "llm"}},
      {"Qwen2-VL-7B-Instruct",
       R"({"architectures": ["Qwen2VLForConditionalGeneration"], "hidden_act": "silu", "hidden_size": 3584,
           "intermediate_size": 18944, "max_position_embeddings": 32768, "model_type": "qwen2_vl",
           "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4, "rms_norm_eps": 1e-06,
           "rope_theta": 1000000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
           "vision_config": {"depth": 32, "embed_dim": 1280, "mlp_ratio": 4, "num_heads": 16, "in_chans": 3,
                             "hidden_size": 3584, "patch_size": 14, "spatial_merge_size": 2, "spatial_patch_size": 14,
                             "temporal_patch_size": 2},
           "vocab_size": 152064})",
       8.29e9,
       {"vision", "merger", "llm"}},
  };
  return m;
}

TEST(HfConfig, PublishedModelsLoadWithTheirPublishedParameterCounts) {
  for (const auto& p : Models()) {
    SCOPED_TRACE(p.folder);
    const std::string path = WriteConfig(p.folder, p.json);
    const Model m = LoadModel(path);
    EXPECT_EQ(m.name, p.folder);  // named after its folder
    std::vector<std::string> names;
    for (const auto& mod : m.modules) names.push_back(mod.name);
    EXPECT_EQ(names, p.modules);
    const double n = static_cast<double>(Params(m));
    EXPECT_NEAR(n / p.params, 1.0, 0.005) << n;
  }
}

// Today's VLM configs (issue 43), as their Hub files are laid out
// (tests/data/hf/*/config.json: gathered from copies of the Hub files and
// transformers' conversion scripts; tests/python/test_hf_counts.py checks the
// same files against transformers' own models), against the parameter
// counts their Hub pages publish. Loom counts no norm weights, so it may
// fall short by a little: 0.5% is the bar.
TEST(HfConfig, TodaysVlmConfigsLoadWithTheirPublishedParameterCounts) {
  struct Card {
    const char* folder;
    double params;
    std::vector<std::string> modules;
    bool planning_only;
  };
  const std::vector<Card> cards = {
      {"Qwen2.5-VL-7B-Instruct", 8.29e9, {"vision", "merger", "llm"}, true},
      {"Qwen3-4B", 4.02e9, {"llm"}, false},  // head_dim 128 x 32 heads != hidden 2560
      {"gemma-3-4b-it", 4.30e9, {"vision", "projector", "llm"}, true},
      {"siglip2-so400m-patch16-naflex", 1.136e9, {"vision", "text"}, true},
      {"InternVL3-8B-hf", 7.94e9, {"vision", "projector", "llm"}, true},
      {"InternVL3-8B", 7.94e9, {"vision", "projector", "llm"}, true},  // the remote-code internvl_chat layout
      {"Idefics3-8B-Llama3", 8.46e9, {"vision", "connector", "llm"}, true},
      {"SmolVLM-Instruct", 2.25e9, {"vision", "connector", "llm"}, true},
      {"pixtral-12b", 12.7e9, {"vision", "projector", "llm"}, true},
      {"Llama-3.2-11B-Vision-Instruct", 10.67e9, {"vision", "projector", "llm"}, true},
      {"llava-onevision-qwen2-7b-ov-hf", 8.03e9, {"vision", "projector", "llm"}, true},
      {"llava-onevision-qwen2-0.5b-ov-hf", 0.894e9, {"vision", "projector", "llm"}, true},
      {"llava-v1.6-mistral-7b-hf", 7.57e9, {"vision", "projector", "llm"}, true},
      {"llava-v1.6-vicuna-7b-hf", 7.06e9, {"vision", "projector", "llm"}, true},
  };
  for (const auto& c : cards) {
    SCOPED_TRACE(c.folder);
    const Model m = LoadModel(std::string(LOOM_TEST_DATA "/hf/") + c.folder + "/config.json");
    EXPECT_EQ(m.name, c.folder);
    std::vector<std::string> names;
    for (const auto& mod : m.modules) names.push_back(mod.name);
    EXPECT_EQ(names, c.modules);
    EXPECT_NEAR(static_cast<double>(Params(m)) / c.params, 1.0, 0.005) << Params(m);
    EXPECT_EQ(!m.planning_only.empty(), c.planning_only) << m.planning_only;
  }
}

// Tokens of one image, per module: (encoder tokens, encoder sequences,
// tokens the LLM reads). Expected values are what transformers 5.24's own
// processors and models produced for the same sizes (LlavaNextProcessor,
// LlavaOnevisionProcessor, InternVLProcessor, Idefics3Processor,
// PixtralProcessor, MllamaImageProcessor, Qwen2_5_VLProcessor with the Hub's
// preprocessor settings, Gemma3Processor).
TEST(HfConfig, ImageTokensEqualTheRealProcessors) {
  struct Case {
    const char* folder;
    int64_t w, h;
    double encoder_tokens, encoder_sequences, llm_image_tokens;
  };
  const std::vector<Case> cases = {
      // LLaVA-NeXT: AnyRes, 577-token tiles (class token) + the base image; unpadded rows + a newline each.
      {"llava-v1.6-mistral-7b-hf", 640, 480, 5 * 577, 5, 2340},
      {"llava-v1.6-mistral-7b-hf", 1024, 1024, 5 * 577, 5, 2928},
      {"llava-v1.6-mistral-7b-hf", 300, 900, 4 * 577, 4, 2376},
      {"llava-v1.6-mistral-7b-hf", 2000, 500, 4 * 577, 4, 1890},
      // OneVision: 384 px tiles of 729, anyres_max_9 shrinking the large grids.
      {"llava-onevision-qwen2-7b-ov-hf", 640, 480, 5 * 729, 5, 2929},
      {"llava-onevision-qwen2-7b-ov-hf", 1024, 1024, 10 * 729, 10, 7371},
      {"llava-onevision-qwen2-7b-ov-hf", 2000, 500, 13 * 729, 13, 7249},
      {"llava-onevision-qwen2-7b-ov-hf", 1920, 1080, 16 * 729, 16, 7269},
      // InternVL: 448 px tiles of 1025 + a thumbnail, 256 tokens each + <img></img>.
      {"InternVL3-8B-hf", 640, 480, 13 * 1025, 13, 3330},
      {"InternVL3-8B-hf", 1024, 1024, 10 * 1025, 10, 2562},
      {"InternVL3-8B-hf", 300, 900, 4 * 1025, 4, 1026},
      {"InternVL3-8B-hf", 1920, 1080, 9 * 1025, 9, 2306},
      // Idefics3: 364 px tiles of 676 + a global image; 169 a frame and the wrapper tokens.
      {"Idefics3-8B-Llama3", 640, 480, 13 * 676, 13, 2227},
      {"Idefics3-8B-Llama3", 1024, 1024, 17 * 676, 17, 2912},
      {"Idefics3-8B-Llama3", 300, 900, 9 * 676, 9, 1544},
      // Pixtral: downscaled to 1024 at most, 16 px patches, a break token per row.
      {"pixtral-12b", 640, 480, 1200, 1, 1230},
      {"pixtral-12b", 300, 900, 1083, 1, 1140},
      {"pixtral-12b", 1920, 1080, 2304, 1, 2340},
      // Mllama: always 4 tiles of 1601 (padded to 1608) in one sequence; 6404 context tokens.
      {"Llama-3.2-11B-Vision-Instruct", 640, 480, 6432, 1, 6404},
      // Qwen2.5-VL: 28 px units, 2x2 merged.
      {"Qwen2.5-VL-7B-Instruct", 640, 480, 1564, 1, 391},
      {"Qwen2.5-VL-7B-Instruct", 300, 900, 1408, 1, 352},
      // Gemma 3: 896 px, 4096 patches pooled to 256.
      {"gemma-3-4b-it", 640, 480, 4096, 1, 256},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(fmt::format("{} {}x{}", c.folder, c.w, c.h));
    const Model m = LoadModel(std::string(LOOM_TEST_DATA "/hf/") + c.folder + "/config.json");
    Sample s;
    s.images.push_back({c.w, c.h, s.AddDoc(0)});
    const std::vector<TokenStats> t = CountModuleTokens(m, s);
    EXPECT_EQ(t[0].tokens, c.encoder_tokens);
    EXPECT_EQ(t[0].sequences, c.encoder_sequences);
    // The LLM reads the image's tokens spliced in, or (Mllama) as cross-attention context.
    const TokenStats& llm = t.back();
    EXPECT_EQ(llm.tokens > 0 ? llm.tokens : llm.context_tokens, c.llm_image_tokens);
  }
}

// The zoo's hand-written YAML for the same models agrees with the configs' translation.
TEST(HfConfig, TranslationsMatchTheZoosHandWrittenModels) {
  const std::vector<std::pair<std::string, std::string>> same = {{"Meta-Llama-3-8B", "llama3-8b"},
                                                                 {"clip-vit-large-patch14", "clip-vit-l"},
                                                                 {"siglip-so400m-patch14-384-vision", "siglip"},
                                                                 {"whisper-large-v3", "whisper-encoder"}};
  for (const auto& [folder, zoo] : same) {
    SCOPED_TRACE(folder);
    for (const auto& p : Models()) {
      if (p.folder != folder) continue;
      // The translation also has what the hand-written zoo models leave out: Llama's final norm
      // (model.norm, hidden weights; with it Meta-Llama-3-8B's count is transformers' exactly,
      // 8,030,261,248), and the vision towers' biases (q, k, v, out: 4 x hidden, fc1: ffn, fc2: hidden,
      // per encoder layer) and CLIP's pre_layrnorm (2 x hidden) less its bias-free patch conv (hidden).
      int64_t more = 0;
      if (folder == "Meta-Llama-3-8B") more = 4096;
      if (folder == "clip-vit-large-patch14") more = 24 * (5 * 1024 + 4096) + 2 * 1024 - 1024;
      if (folder == "siglip-so400m-patch14-384-vision") more = 27 * (5 * 1152 + 4304);
      EXPECT_EQ(Params(LoadModel(WriteConfig(p.folder, p.json))), Params(LoadModel(zoo)) + more);
    }
  }
}

TEST(HfConfig, ItWorksAnywhereAModelIsTaken) {
  // `from:` a config.json, relative to the including file.
  WriteConfig("Qwen2-0.5B", Models()[2].json);
  const std::string spec =
      test::WriteTemp("hf/with-from.yaml", "model: m\nmodules:\n  - name: llm\n    from: Qwen2-0.5B/config.json\n");
  const Model m = LoadModel(spec);
  ASSERT_EQ(m.modules.size(), 1u);
  EXPECT_NEAR(static_cast<double>(Params(m)) / 0.494e9, 1.0, 0.005);
}

// What the runtime needs to equal transformers (spec/layer.h), read from
// each family's config: Qwen3-0.6B's own config.json (head_dim 128 over 16
// heads of a 1024-wide model, q/k norms, tied embeddings).
TEST(HfConfig, ArchitectureDetailsOfEachFamily) {
  const Model qwen3 = LoadModel(WriteConfig("Qwen3-0.6B", R"({
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "head_dim": 128, "hidden_act": "silu",
    "hidden_size": 1024, "intermediate_size": 3072, "max_position_embeddings": 40960, "model_type": "qwen3",
    "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
    "rope_scaling": null, "rope_theta": 1000000, "tie_word_embeddings": true, "vocab_size": 151936})"));
  const Layer& block = qwen3.modules[0].layers[1];
  EXPECT_EQ(block.HeadDim(), 128);
  EXPECT_EQ(block.norm, NormKind::kRmsNorm);
  EXPECT_EQ(block.norm_eps, 1e-6);
  EXPECT_TRUE(block.qk_norm);
  EXPECT_FALSE(block.qkv_bias || block.out_bias || block.mlp_bias);
  EXPECT_EQ(block.rope.theta, 1e6);
  EXPECT_EQ(block.activation, Activation::kSilu);
  EXPECT_EQ(qwen3.modules[0].layers.back().final_norm, NormKind::kRmsNorm);
  // 28 x (q 1024x2048 + k, v 1024x1024 + o 2048x1024 + MLP 3 x 1024x3072 + two
  // norms + two 128-wide q/k norms) + the tied 151936 x 1024 embedding + the
  // final norm: 596,049,920, the count transformers gives Qwen3-0.6B.
  EXPECT_NEAR(static_cast<double>(Params(qwen3)) / 596049920.0, 1.0, 0.0005);

  const Model qwen2 = LoadModel(WriteConfig("qwen2-bias", R"({"model_type": "qwen2", "attention_bias": false})"));
  EXPECT_TRUE(qwen2.modules[0].layers[1].qkv_bias);  // Qwen2 always, on q, k and v only
  EXPECT_FALSE(qwen2.modules[0].layers[1].out_bias);
  const Model llama = LoadModel(WriteConfig("llama3-rope", R"({"model_type": "llama", "attention_bias": true,
    "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
                        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})"));
  const Layer& l = llama.modules[0].layers[1];
  EXPECT_TRUE(l.qkv_bias && l.out_bias);
  EXPECT_EQ(l.rope, (Rope{500000.0, 0, RopeScaling::kLlama3, 32.0, 1.0, 4.0, 8192}));
  const Model old = LoadModel(WriteConfig("llama-old-rope", R"({"model_type": "llama", "rope_theta": 500000.0,
    "rope_scaling": {"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192}})"));
  EXPECT_EQ(old.modules[0].layers[1].rope, (Rope{500000.0, 0, RopeScaling::kLlama3, 8.0, 1.0, 4.0, 8192}));
}

// Issue 43: SigLIP's text tower was priced at 4,197 tokens a sample, though its
// tokenizer cuts each text to max_position_embeddings (64). CLIP's context is 77.
TEST(HfConfig, ATextTowerReadsAtMostItsContext) {
  for (const auto& [type, context] : {std::pair<std::string, int64_t>{"siglip", 64}, {"clip", 77}}) {
    SCOPED_TRACE(type);
    const Model m = LoadModel(WriteConfig(type + "-dual", R"({"model_type": ")" + type + R"("})"));
    const Module& text = m.modules[m.FindModule("text")];
    EXPECT_EQ(text.tokens.max_tokens, context);
    const Workload w = LoadWorkload("obelics");  // documents of thousands of text tokens
    const Batch batch = DrawBatch(w, 0);
    double most = 0;
    for (const Sample& s : batch.samples) {
      for (int d = 0; d < s.num_docs(); ++d) most = std::max(most, static_cast<double>(s.doc_text_tokens[d]));
      // Every document's sequence is at most the context: their squares bound the sum of squares.
      const TokenStats st = CountModuleTokens(m, s)[m.FindModule("text")];
      EXPECT_LE(st.tokens, static_cast<double>(context * s.num_docs()));
      EXPECT_LE(st.sum_sq, st.sequences * static_cast<double>(context * context));
      EXPECT_GT(st.tokens, 0);
    }
    ASSERT_GT(most, context);  // the cap matters for this batch
  }
}

TEST(HfConfig, UnknownArchitecturesAndBadFieldsAreNamed) {
  // A truncated config.json is JSON to its reader (it was called "malformed YAML").
  test::ExpectError([] { LoadModel(WriteConfig("cut", R"({"model_type": "llama", "hidden_size": )")); },
                    {"cut/config.json:", "malformed JSON"});
  // A .json file is a config.json to its reader: a trailing comma or a missing model_type is said
  // so, not "model: missing required field" of Loom's YAML (second audit H026, H078); no
  // "[json.exception...]" tag leaks.
  test::ExpectError([] { LoadModel(WriteConfig("comma", R"({"model_type": "llama",})")); },
                    {"comma/config.json: malformed JSON: parse error at line 1, column 24"});
  try {
    LoadModel(WriteConfig("comma", R"({"model_type": "llama",})"));
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find("json.exception"), std::string::npos) << e.what();
  }
  test::ExpectError([] { LoadModel(WriteConfig("notype", R"({"hidden_size": 64})")); },
                    {"notype/config.json: model_type: missing"});
  // An explicit null is no default (Qwen3-4B read 7.42B), a llama3 rope lacks no factor, an
  // image holds a patch (H019, H044, H028).
  test::ExpectError([] { LoadModel(WriteConfig("nullffn", R"({"model_type": "llama", "intermediate_size": null})")); },
                    {"nullffn/config.json: intermediate_size: null; expected an integer"});
  test::ExpectError(
      [] { LoadModel(WriteConfig("rope", R"({"model_type": "llama", "rope_scaling": {"rope_type": "llama3"}})")); },
      {"rope/config.json: rope_scaling.factor: missing; llama3 rope scaling needs it"});
  test::ExpectError(
      [] {
        LoadModel(WriteConfig(
            "tinyimg",
            R"({"model_type": "llava", "vision_config": {"model_type": "clip_vision_model", "image_size": 10, "patch_size": 14}})"));
      },
      {"tinyimg/config.json: vision_config.image_size: 10 px holds no 14-px patch"});
  test::ExpectError([] { LoadModel(WriteConfig("mamba", R"({"model_type": "mamba", "hidden_size": 768})")); },
                    {"config.json: model_type: 'mamba' is not an architecture Loom reads", "valid: llama, mistral"});
  // Issue 43: a type Loom does not read yet names the closest one it does and what to do;
  // a misspelt one gets a did-you-mean.
  test::ExpectError([] { LoadModel(WriteConfig("qwen3vl", R"({"model_type": "qwen3_vl"})")); },
                    {"model_type: 'qwen3_vl' is not an architecture Loom reads yet; the closest it reads is "
                     "qwen2_5_vl: the same patch merger family"});
  test::ExpectError([] { LoadModel(WriteConfig("pixtral", R"({"model_type": "pixtral"})")); },
                    {"the closest it reads is llava", "give the llava config.json that holds it"});
  // The newer families check what they read too.
  test::ExpectError([] { LoadModel(WriteConfig("qwen25vl", R"({"model_type": "qwen2_5_vl"})")); },
                    {"qwen25vl/config.json: vision_config.out_hidden_size (3584) must equal the LLM's hidden_size "
                     "(8192): the merger feeds the LLM"});
  test::ExpectError(
      [] {
        LoadModel(WriteConfig("ovpins", R"({"model_type": "llava_onevision", "image_grid_pinpoints": [[384, 500]]})"));
      },
      {"image_grid_pinpoints: entry 0: expected [height, width], both positive multiples of tile_px 384"});
  test::ExpectError(
      [] {
        LoadModel(
            WriteConfig("mllamax", R"({"model_type": "mllama", "text_config": {"cross_attention_layers": [99]}})"));
      },
      {"mllamax/config.json: text_config.cross_attention_layers: expected layer indices from 0 to 39"});
  test::ExpectError([] { LoadModel(WriteConfig("ivl", R"({"model_type": "internvl", "downsample_ratio": 0.3})")); },
                    {"ivl/config.json: downsample_ratio: 0.3 must be 1 / n"});
  test::ExpectError([] { LoadModel(WriteConfig("lama", R"({"model_type": "lama"})")); }, {"did you mean 'llama'?"});
  test::ExpectError([] { LoadModel(WriteConfig("noname", R"({"architectures": ["X"], "hidden_size": 768})")); },
                    {"config.json: model_type: missing"});
  test::ExpectError([] { LoadModel(WriteConfig("badfield", R"({"model_type": "llama", "hidden_size": "big"})")); },
                    {"config.json: hidden_size: expected an integer from 1 to 16777216, got \"big\""});
  test::ExpectError(
      [] {
        LoadModel(WriteConfig("badtext", R"({"model_type": "llava", "text_config": {"model_type": "gpt_neox"}})"));
      },
      {"badtext/config.json: text_config.model_type: unknown language model 'gpt_neox'"});
  test::ExpectError(
      [] {
        LoadModel(
            WriteConfig("yarn", R"({"model_type": "llama", "rope_scaling": {"rope_type": "yarn", "factor": 4}})"));
      },
      {"yarn/config.json: rope_scaling.rope_type: rope type 'yarn' is not one Loom's runtime computes; valid: default, "
       "llama3"});
  test::ExpectError([] { LoadModel(WriteConfig("relu", R"({"model_type": "mistral", "hidden_act": "relu"})")); },
                    {"relu/config.json: hidden_act: activation 'relu'", "valid: silu, gelu"});
  // Issue 45: the head and GQA checks named the field but not the file.
  test::ExpectError(
      [] {
        LoadModel(WriteConfig("heads5", R"({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 5,
                                            "num_key_value_heads": 5, "intermediate_size": 128, "vocab_size": 128,
                                            "num_hidden_layers": 1})"));
      },
      {"heads5/config.json: num_attention_heads: 5 does not divide hidden_size 64; give head_dim"});
  test::ExpectError(
      [] {
        LoadModel(WriteConfig("gqa3", R"({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
                                          "num_key_value_heads": 3, "intermediate_size": 128, "vocab_size": 128,
                                          "num_hidden_layers": 1})"));
      },
      {"gqa3/config.json: num_key_value_heads: 3 must divide num_attention_heads (4)"});
  test::ExpectError([] { LoadModel(WriteConfig("eps", R"({"model_type": "qwen2", "rms_norm_eps": -1})")); },
                    {"rms_norm_eps: expected a positive number, got -1"});
  EXPECT_FALSE(LooksLikeHfConfig("model: m\nmodules: []\n"));
  EXPECT_TRUE(LooksLikeHfConfig(" {\"model_type\": \"llama\"}"));
}

}  // namespace
}  // namespace loom
