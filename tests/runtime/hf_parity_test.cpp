// Loom's runtime layers against transformers itself: for each LLM family a
// tiny random model made and saved by transformers (config.json and
// model.safetensors), its weights loaded into Loom's layer stack, and the same
// two token sequences run through both. Logits and the loss must agree to
// fp32 rounding (issue 41's parity test, one process; the plans with TP, PP,
// DP and CP follow through `loom run --data`).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <array>
#include <deque>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "loom/runtime/hf_weights.h"
#include "loom/runtime/packing.h"
#include "loom/runtime/torch_model.h"
#include "loom/spec/model.h"
#include "loom/weights/checkpoint_weights.h"
#include "test_util.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

// Makes the model with transformers, saves it, and writes its logits for two
// sequences (run one at a time, as Loom runs each packed document on its own)
// and its loss over both (labels = input ids, transformers' shift and mean
// over the 10 scored tokens) into reference.safetensors.
const char* kMakeReference = R"(
import json, sys, torch
import transformers
from safetensors.torch import save_file
family, out, overrides = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
torch.manual_seed(0)
common = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
common.update(overrides)
config = {"llama": transformers.LlamaConfig, "mistral": transformers.MistralConfig,
          "qwen2": transformers.Qwen2Config, "qwen3": transformers.Qwen3Config}[family](**common)
model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
with torch.no_grad():  # biases and norms away from their 0 / 1 start, so a missing one shows
    for name, p in model.named_parameters():
        if name.endswith("bias") or "norm" in name:
            p.add_(torch.randn_like(p) * 0.1)
model.save_pretrained(out)
seqs = [[5, 17, 99, 3, 64, 127, 0], [42, 8, 8, 77, 1]]
logits, loss_sum = [], 0.0
for ids in seqs:
    t = torch.tensor([ids])
    with torch.no_grad():
        r = model(input_ids=t, labels=t)
    logits.append(r.logits[0])
    loss_sum += r.loss.item() * (len(ids) - 1)
save_file({"logits": torch.cat(logits).contiguous(), "loss": torch.tensor(loss_sum / 10)},
          out + "/reference.safetensors")
)";

struct Family {
  std::string name, family, overrides;
};

void PrintTo(const Family& f, std::ostream* os) { *os << f.name; }  // CTest's test names

class HfParity : public testing::TestWithParam<Family> {};

torch::Tensor ReadTensor(const weights::SafetensorsFile& file, const std::string& name) {
  const weights::TensorInfo& t = file.At(name);
  torch::Tensor out = torch::empty(t.shape, torch::kFloat);
  file.Read(t, std::span<std::byte>(static_cast<std::byte*>(out.data_ptr()), out.nbytes()));
  return out;
}

TEST_P(HfParity, LogitsAndLossEqualTransformers) {
  const Family& f = GetParam();
  const fs::path dir = fs::temp_directory_path() / "loom_tests" / ("hf_" + f.name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto [rc, out] = test::RunPython(kMakeReference, f.family + " " + dir.string() + " '" + f.overrides + "'");
  ASSERT_EQ(rc, 0) << out;

  const Model model = LoadModel((dir / "config.json").string());
  ASSERT_EQ(model.modules.size(), 1u);
  const int layers = static_cast<int>(model.modules[0].layers.size());
  runtime::LayerStack stack(model, std::vector<LayerRange>{{model.modules[0].name, 0, layers}}, /*seed=*/1);
  const weights::CheckpointWeights checkpoint(dir.string());
  runtime::LoadHfWeights(*stack, model, checkpoint, runtime::TensorParallel{});

  Batch batch;
  Sample s;
  s.AddDoc(7);
  s.AddDoc(5);
  batch.samples = {s};
  const runtime::MicrobatchPacking packing = runtime::PackMicrobatch(model, batch, std::vector<int>{0});
  runtime::TextTokens text;
  text.ids = {{{5, 17, 99, 3, 64, 127, 0}, {42, 8, 8, 77, 1}}};
  text.labels = text.ids;
  runtime::MicrobatchInput mb;
  mb.packing = &packing;
  mb.text = &text;
  const runtime::ModuleTensors result = stack->forward({}, mb);
  const torch::Tensor logits = result.at(0).squeeze(0);

  const weights::SafetensorsFile reference((dir / "reference.safetensors").string());
  const torch::Tensor expected = ReadTensor(reference, "logits");
  ASSERT_EQ(logits.sizes(), expected.sizes());
  const double scale = expected.abs().max().item<double>();
  EXPECT_LT((logits - expected).abs().max().item<double>(), 1e-5 * scale) << f.name;
  const double loss = runtime::TextLoss(result.at(0), mb, /*batch_text_tokens=*/10).item<double>();
  EXPECT_NEAR(loss, ReadTensor(reference, "loss").item<double>(), 1e-5 * loss) << f.name;

  // Another model's checkpoint is refused by name.
  Model other = model;
  other.modules[0].layers[1].ffn_hidden *= 2;
  runtime::LayerStack wrong(other, std::vector<LayerRange>{{other.modules[0].name, 0, layers}}, 1);
  test::ExpectError([&] { runtime::LoadHfWeights(*wrong, other, checkpoint, runtime::TensorParallel{}); },
                    {"model.layers.0.mlp.up_proj.weight", "is [96, 64] in the checkpoint", "[192, 64]"});
}

INSTANTIATE_TEST_SUITE_P(
    Families, HfParity,
    testing::Values(Family{"llama", "llama", "{}"},
                    Family{"llama3_tied_biased", "llama",
                           R"({"tie_word_embeddings": true, "attention_bias": true, "mlp_bias": true,
                               "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                               "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                               "original_max_position_embeddings": 16}})"},
                    Family{"mistral", "mistral", "{}"}, Family{"qwen2", "qwen2", "{}"},
                    Family{"qwen3", "qwen3", R"({"head_dim": 32})"}),
    [](const testing::TestParamInfo<Family>& info) { return info.param.name; });

// A tiny LLaVA made by transformers (a CLIP or SigLIP tower, the projector,
// a Llama or Qwen2), two documents of one image and a caption each, run one
// at a time by transformers (input_ids: the image token for each image
// feature, then the caption) and as one packed sample by Loom (each
// document's image tokens, then its text). Labels: the captions' tokens but
// the first (Loom scores the text's own next tokens; the last image token's
// prediction of the first caption token is not scored yet).
const char* kMakeLlavaReference = R"(
import json, sys, torch
import transformers
from safetensors.torch import save_file
tower, llm, out, overrides = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
torch.manual_seed(0)
vision = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
              image_size=16, patch_size=4)
vision = transformers.CLIPVisionConfig(**vision) if tower == "clip" else transformers.SiglipVisionConfig(**vision)
text = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=256)
text = transformers.LlamaConfig(**text) if llm == "llama" else transformers.Qwen2Config(**text)
config = transformers.LlavaConfig(vision_config=vision, text_config=text, image_token_index=127, **overrides)
model = transformers.LlavaForConditionalGeneration(config).eval()
with torch.no_grad():  # biases and norms away from their 0 / 1 start, so a missing one shows
    for name, p in model.named_parameters():
        if name.endswith("bias") or "norm" in name or "embedding" in name:
            p.add_(torch.randn_like(p) * 0.1)
model.save_pretrained(out)
grid = 16 + (1 if tower == "clip" else 0)
image_tokens = grid - 1 if config.vision_feature_select_strategy == "default" else grid
captions = [[5, 17, 99, 3, 64, 0], [42, 8, 8, 77, 1]]
pixels = torch.randn(2, 3, 16, 16)
logits, loss_sum = [], 0.0
for i, caption in enumerate(captions):
    ids = torch.tensor([[127] * image_tokens + caption])
    labels = torch.tensor([[-100] * (image_tokens + 1) + caption[1:]])
    with torch.no_grad():
        r = model(input_ids=ids, pixel_values=pixels[i:i + 1], labels=labels)
    logits.append(r.logits[0])
    loss_sum += r.loss.item() * (len(caption) - 1)
save_file({"logits": torch.cat(logits).contiguous(), "loss": torch.tensor(loss_sum / 9), "pixels": pixels,
           "image_tokens": torch.tensor(float(image_tokens))}, out + "/reference.safetensors")
)";

struct Llava {
  std::string name, tower, llm, overrides;
};

void PrintTo(const Llava& f, std::ostream* os) { *os << f.name; }

class HfLlavaParity : public testing::TestWithParam<Llava> {};

TEST_P(HfLlavaParity, LogitsAndLossEqualTransformers) {
  const Llava& f = GetParam();
  const fs::path dir = fs::temp_directory_path() / "loom_tests" / ("hf_" + f.name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto [rc, out] =
      test::RunPython(kMakeLlavaReference, f.tower + " " + f.llm + " " + dir.string() + " '" + f.overrides + "'");
  ASSERT_EQ(rc, 0) << out;

  const Model model = LoadModel((dir / "config.json").string());
  ASSERT_EQ(model.modules.size(), 3u);
  std::vector<LayerRange> all;
  for (const auto& m : model.modules) all.push_back({m.name, 0, static_cast<int>(m.layers.size())});
  runtime::LayerStack stack(model, all, /*seed=*/1);
  const weights::CheckpointWeights checkpoint(dir.string());
  runtime::LoadHfWeights(*stack, model, checkpoint, runtime::TensorParallel{});

  const weights::SafetensorsFile reference((dir / "reference.safetensors").string());
  const torch::Tensor pixels = ReadTensor(reference, "pixels");
  Batch batch;
  Sample s;
  s.AddDoc(6);
  s.AddDoc(5);
  s.images = {ImageInput{16, 16, 0}, ImageInput{16, 16, 1}};
  batch.samples = {s};
  const runtime::MicrobatchPacking packing = runtime::PackMicrobatch(model, batch, std::vector<int>{0});
  const int64_t image_tokens = static_cast<int64_t>(ReadTensor(reference, "image_tokens").item<float>());
  ASSERT_EQ(packing.Tokens(2), 2 * image_tokens + 11);  // the vision_feature_select_strategy's tokens per image
  runtime::TextTokens text;
  text.ids = {{{5, 17, 99, 3, 64, 0}, {42, 8, 8, 77, 1}}};
  text.labels = text.ids;
  runtime::ImagePixels images;
  images.pixels = {{pixels[0], pixels[1]}};
  runtime::MicrobatchInput mb;
  mb.packing = &packing;
  mb.text = &text;
  mb.images = &images;
  const runtime::ModuleTensors result = stack->forward({}, mb);
  const torch::Tensor logits = result.at(2).squeeze(0);

  const torch::Tensor expected = ReadTensor(reference, "logits");
  ASSERT_EQ(logits.sizes(), expected.sizes());
  const double scale = expected.abs().max().item<double>();
  EXPECT_LT((logits - expected).abs().max().item<double>(), 1e-5 * scale) << f.name;
  const double loss = runtime::TextLoss(result.at(2), mb, /*batch_text_tokens=*/9).item<double>();
  EXPECT_NEAR(loss, ReadTensor(reference, "loss").item<double>(), 1e-5 * loss) << f.name;

  // The same weights in the layouts transformers has written before (4.x's
  // vision_tower.vision_model.*, LlavaModel's model.*) load to the same logits.
  for (const auto& [tower, llm, head] : std::vector<std::array<std::string, 3>>{
           {"vision_tower.vision_model.", "language_model.model.", "language_model.lm_head."},
           {"model.vision_tower.", "model.language_model.", "lm_head."}}) {
    const fs::path other = dir / ("layout_" + tower);
    fs::create_directories(other);
    fs::copy_file(dir / "config.json", other / "config.json", fs::copy_options::overwrite_existing);
    const weights::SafetensorsFile saved((dir / "model.safetensors").string());
    std::deque<std::vector<std::byte>> hold;
    std::vector<weights::TensorToWrite> renamed;
    for (const auto& t : saved.layout().tensors) {
      std::string name = t.name;
      for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
               {"vision_tower.", tower},
               {"language_model.model.", llm},
               {"language_model.lm_head.", head},
               {"multi_modal_projector.", tower.rfind("model.", 0) == 0 ? "model.multi_modal_projector." : ""}}) {
        if (!to.empty() && name.rfind(from, 0) == 0) {
          name = to + name.substr(from.size());
          break;
        }
      }
      hold.emplace_back(t.bytes());
      saved.Read(t, hold.back());
      renamed.push_back({name, t.dtype, t.shape, hold.back()});
    }
    weights::WriteSafetensors((other / "model.safetensors").string(), renamed);
    runtime::LayerStack again(model, all, /*seed=*/2);
    runtime::LoadHfWeights(*again, model, weights::CheckpointWeights(other.string()), runtime::TensorParallel{});
    EXPECT_TRUE(torch::equal(again->forward({}, mb).at(2).squeeze(0), logits)) << tower;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, HfLlavaParity,
                         testing::Values(Llava{"llava_clip_llama", "clip", "llama", "{}"},
                                         Llava{"llava_siglip_qwen2_full_last", "siglip", "qwen2",
                                               R"({"vision_feature_select_strategy": "full", "vision_feature_layer": -1,
                              "projector_hidden_act": "gelu_pytorch_tanh"})"},
                                         Llava{"llava_clip_default_first_layer_tied", "clip", "qwen2",
                                               R"({"vision_feature_layer": 1, "multimodal_projector_bias": false,
                                                   "tie_word_embeddings": true})"}),
                         [](const testing::TestParamInfo<Llava>& info) { return info.param.name; });

// `loom run --model DIR` trains a LLaVA from its checkpoint (image-caption
// samples with synthetic pixels) equally on one process and under TP 2, PP 2,
// DP 2 and CP 2; the seeded model (the config alone) trains differently.
TEST(HfLlavaParity, LoomRunTrainsTheCheckpointEquallyUnderEveryLayout) {
  const fs::path dir = fs::temp_directory_path() / "loom_tests" / ("hf_llava_run_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto [rc, out] = test::RunPython(kMakeLlavaReference, "clip llama " + dir.string() + " '{}'");
  ASSERT_EQ(rc, 0) << out;
  const std::string data = " --workload " + std::string(LOOM_TEST_DATA) +
                           "/runtime/tiny-llava-data.yaml --steps 2 --lr 0.01 --json --timeout 60";
  auto losses = [&](const std::string& layout) {
    auto [code, text] = test::RunLoom("run --model " + dir.string() + data + " " + layout);
    EXPECT_EQ(code, 0) << layout << "\n" << text;
    std::vector<double> got;
    if (code == 0) {
      const nlohmann::json j = nlohmann::json::parse(text);
      for (const auto& l : j["losses"]) got.push_back(l.get<double>());
    }
    return got;
  };
  const std::vector<double> one = losses("--cluster h100:1x1");
  ASSERT_EQ(one.size(), 2u);
  EXPECT_LT(one[1], one[0]);
  for (const std::string layout : {"--cluster h100:1x2 --tp 2", "--cluster h100:1x2 --pp 2 --microbatches 2",
                                   "--cluster h100:1x2 --dp 2", "--cluster h100:1x2 --cp 2"}) {
    const std::vector<double> other = losses(layout);
    ASSERT_EQ(other.size(), 2u) << layout;
    for (int i = 0; i < 2; ++i) EXPECT_NEAR(other[i], one[i], 1e-5 * one[i]) << layout << " step " << i;
  }
  auto [code, text] = test::RunLoom("run --model " + (dir / "config.json").string() + data + " --cluster h100:1x1");
  ASSERT_EQ(code, 0) << text;
  EXPECT_GT(std::abs(nlohmann::json::parse(text)["losses"][0].get<double>() - one[0]), 1e-3 * one[0]);
}

// What both training references end with: the loss over `samples` (a
// sample's "pixels", where it has them, are its images) as transformers
// computes it, two torch.optim.AdamW steps (lr 0.01), the weights after both
// saved to d/trained (what `loom run --steps 2 --save` writes), the two losses printed.
const char* kTwoAdamWSteps = R"(
def loss():
    total, count = 0.0, 0
    for s in samples:
        images = {"pixel_values": s["pixels"]} if "pixels" in s else {}
        logits = model(input_ids=torch.tensor([s["input_ids"]]), **images).logits[0, :-1]
        target = torch.tensor(s["labels"][1:])
        total = total + torch.nn.functional.cross_entropy(logits, target, ignore_index=-100, reduction="sum")
        count += int((target != -100).sum())
    return total / count
# loom run's defaults: decay 0.01 on matrices and embeddings only, gradients clipped to norm 1.
params = [p for p in model.parameters() if p.requires_grad]
opt = torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.01},
                         {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}], lr=0.01)
l0 = loss()
l0.backward()
torch.nn.utils.clip_grad_norm_(params, 1.0)
opt.step()
opt.zero_grad()
l1 = loss()
l1.backward()
torch.nn.utils.clip_grad_norm_(params, 1.0)
opt.step()
model.save_pretrained(d + "/trained")
print(json.dumps([l0.item(), l1.item()]))
)";

// Loads each folder `loom run --save` wrote with from_pretrained (no key
// missing, unexpected or mismatched) and compares it with transformers' own
// model after the same two steps: the largest difference of any parameter,
// and of the logits over the data's samples (with their pixel_values files).
const char* kCompareSaved = R"(
import json, sys, torch
import transformers
from safetensors.torch import load_file
d, saved = sys.argv[1], sys.argv[2:]
llava = json.load(open(d + "/config.json"))["model_type"] == "llava"
cls = transformers.LlavaForConditionalGeneration if llava else transformers.AutoModelForCausalLM
ref = cls.from_pretrained(d + "/trained", dtype=torch.float32).eval()
samples = [json.loads(l) for l in open(d + "/data.jsonl")]
def logits(m):
    out = []
    for s in samples:
        images = {"pixel_values": load_file(d + "/" + s["pixel_values"])["pixel_values"]} if "pixel_values" in s else {}
        with torch.no_grad():
            out.append(m(input_ids=torch.tensor([s["input_ids"]]), **images).logits[0])
    return out
want = logits(ref)
out = {}
for s in saved:
    m, info = cls.from_pretrained(s, dtype=torch.float32, output_loading_info=True)
    missing = [k for key in ("missing_keys", "unexpected_keys", "mismatched_keys") for k in info[key]]
    assert not missing, (s, info)
    m.eval()
    assert list(m.state_dict()) == list(ref.state_dict())
    diff = torch.cat([(a - b).abs().flatten() for a, b in zip(m.state_dict().values(), ref.state_dict().values())])
    p = [diff.max().item(), diff.mean().item(), (diff > 1e-5).float().mean().item()]
    l = max((a - b).abs().max().item() for a, b in zip(logits(m), want))
    out[s] = p + [l]
print(json.dumps(out))
)";

// Each folder in `saved` holds the weights transformers trained in `dir`.
void ExpectSavedLikeTransformers(const fs::path& dir, const std::vector<std::string>& saved) {
  std::string args = dir.string();
  for (const auto& s : saved) args += " " + s;
  const auto [rc, out] = test::RunPython(kCompareSaved, args);
  ASSERT_EQ(rc, 0) << out;
  const nlohmann::json diffs = nlohmann::json::parse(out.substr(out.rfind('{')));
  for (const auto& s : saved) {
    SCOPED_TRACE(s);
    // AdamW's first steps move each weight by about lr (0.01) whatever its
    // gradient's size: a slice saved in the wrong place or a weight not
    // trained is off by a step or more in every element it holds. Adam
    // divides by the gradient's own size, so fp32 sums taken in another
    // order (even in one process, and more so in the -O1 sanitizer build)
    // show in the few weights with tiny gradients: measured up to 6.9e-5
    // (Release) and 2.2e-4 (ASan) in one element, a mean of 2.9e-8 and
    // 0.024% of elements past 1e-5. So: no element off by a tenth of a step,
    // and the bulk equal to fp32 rounding.
    EXPECT_LT(diffs[s][0].get<double>(), 1e-3) << "largest parameter difference";
    EXPECT_LT(diffs[s][1].get<double>(), 1e-6) << "mean parameter difference";
    EXPECT_LT(diffs[s][2].get<double>(), 0.01) << "fraction of parameters off by more than 1e-5";
    EXPECT_LT(diffs[s][3].get<double>(), 1e-4) << "largest logit difference";
  }
}

// `loom run --model DIR --data FILE.jsonl` with images: token ids holding a
// run of the image token per image feature (at the start, in the middle, two
// in one sample), each line's pixel_values file, labels ignoring the image
// tokens and a prompt. The loss before and after one AdamW step equals
// transformers' LLaVA under one process, TP 2, PP 2, DP 2 (ZeRO-3) and CP 2.
const char* kTrainLlavaReference = R"(
import json, sys, torch
import transformers
from safetensors.torch import save_file
d = sys.argv[1]
model = transformers.LlavaForConditionalGeneration.from_pretrained(d, dtype=torch.float32)
model.train()
torch.manual_seed(2)
T = 16  # image features per image: 16 patches (the class token dropped)
texts = [([3, 9], [11, 12, 13, 14]), ([], [20, 21, 22, 23, 24, 25]), ([5], [6, 7], [8, 9, 10]), ([], [30, 31, 32])]
samples = []
for i, pieces in enumerate(texts):
    ids = []
    for j, piece in enumerate(pieces):
        ids += piece
        if j < len(pieces) - 1:
            ids += [127] * T
    labels = [-100 if t == 127 else t for t in ids]
    if i == 3:
        labels[T:T + 1] = [-100]  # a prompt the loss ignores
    pixels = torch.randn(len(pieces) - 1, 3, 16, 16)
    save_file({"pixel_values": pixels}, f"{d}/pixels{i}.safetensors")
    samples.append({"input_ids": ids, "labels": labels, "image_token_id": 127, "pixel_values": f"pixels{i}.safetensors",
                    "pixels": pixels})
with open(d + "/data.jsonl", "w") as f:
    for s in samples:
        f.write(json.dumps({k: v for k, v in s.items() if k != "pixels"}) + "\n")
)";

TEST(HfLlavaParity, TrainingOnTokenizedImagesEqualsTransformersUnderEveryLayout) {
  const fs::path dir = fs::temp_directory_path() / "loom_tests" / ("hf_llava_data_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto [rc, out] = test::RunPython(kMakeLlavaReference, "clip llama " + dir.string() + " '{}'");
  ASSERT_EQ(rc, 0) << out;
  std::tie(rc, out) = test::RunPython(std::string(kTrainLlavaReference) + kTwoAdamWSteps, dir.string());
  ASSERT_EQ(rc, 0) << out;
  const nlohmann::json expected = nlohmann::json::parse(out.substr(out.rfind('[')));
  const std::string base = "run --model " + dir.string() + " --data " + (dir / "data.jsonl").string() +
                           " --global-batch 4 --steps 2 --lr 0.01 --precision fp32 --json --timeout 60 ";
  std::vector<std::string> saved;
  for (const std::string layout :
       {"--cluster h100:1x1", "--cluster h100:1x2 --tp 2", "--cluster h100:1x2 --pp 2 --microbatches 2",
        "--cluster h100:1x2 --dp 2 --zero-stage 3", "--cluster h100:1x2 --cp 2"}) {
    SCOPED_TRACE(layout);
    saved.push_back((dir / ("saved" + std::to_string(saved.size()))).string());
    auto [code, text] = test::RunLoom(base + layout + " --save " + saved.back());
    ASSERT_EQ(code, 0) << text;
    const nlohmann::json j = nlohmann::json::parse(text);
    for (int step = 0; step < 2; ++step) {
      const double want = expected[step].get<double>();
      EXPECT_NEAR(j["losses"][step].get<double>(), want, 1e-5 * want) << "step " << step;
    }
  }
  ExpectSavedLikeTransformers(dir, saved);
  // An image of another length than the model's features is named.
  std::ofstream(dir / "bad.jsonl") << R"({"input_ids": [1, 127, 127, 2], "image_token_id": 127, )"
                                   << R"("pixel_values": "pixels0.safetensors"})"
                                   << "\n";
  auto [code, text] = test::RunLoom("run --model " + dir.string() + " --data " + (dir / "bad.jsonl").string() +
                                    " --global-batch 1 --steps 1 --cluster h100:1x1");
  EXPECT_EQ(code, 2) << text;
  EXPECT_NE(text.find("bad.jsonl:1: input_ids: image 0 is 2 image tokens (from position 1), but the model hands on "
                      "16 per image"),
            std::string::npos)
      << text;
  // Runtime audit R4-07: the images stand as the config's image_token_index
  // (127), which transformers finds them by; another id, or that id in a
  // line without images, is named.
  const std::string pixels = R"("pixel_values": "pixels0.safetensors"})";
  std::string ids;  // one image's 16 features as token 126
  for (int i = 0; i < 16; ++i) ids += ", 126";
  for (const auto& [line, words] : std::vector<std::pair<std::string, std::string>>{
           {R"({"input_ids": [1)" + ids + R"(, 2], "image_token_id": 126, )" + pixels,
            "other.jsonl:1: image_token_id is 126, but model " + dir.filename().string() +
                " stands an image feature as token 127"},
           {R"({"input_ids": [1, 2, 127, 3]})", "other.jsonl:1: input_ids[2] is 127, model " + dir.filename().string() +
                                                    "'s image token, but the line has no "
                                                    "images"}}) {
    std::ofstream(dir / "other.jsonl") << line << "\n";
    auto [other_code, other_text] =
        test::RunLoom("run --model " + dir.string() + " --data " + (dir / "other.jsonl").string() +
                      " --global-batch 1 --steps 1 --cluster h100:1x1");
    EXPECT_EQ(other_code, 2) << other_text;
    EXPECT_NE(other_text.find(words), std::string::npos) << words << "\n" << other_text;
  }
}

// `loom run --model DIR` starts from DIR's safetensors under every layout: a
// Llama with biases everywhere (q/k/v column-parallel, o and down row-parallel:
// their biases added once, after the all-reduce) trains the same two steps on
// one process, under TP 2, PP 2 and DP 2; the seeded model (the config alone)
// trains differently.
TEST(HfParity, LoomRunStartsFromTheCheckpointUnderEveryLayout) {
  const fs::path dir = fs::temp_directory_path() / "loom_tests" / ("hf_run_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto [rc, out] = test::RunPython(kMakeReference, "llama " + dir.string() +
                                                             R"( '{"attention_bias": true, "mlp_bias": true}')");
  ASSERT_EQ(rc, 0) << out;
  const std::string data = " --workload text --global-batch 4 --seq-len 24 --steps 2 --lr 0.01 --precision fp32 --json";
  auto losses = [&](const std::string& model, const std::string& layout) {
    auto [code, text] = test::RunLoom("run --model " + model + data + " " + layout);
    EXPECT_EQ(code, 0) << layout << "\n" << text;
    std::vector<double> got;
    if (code == 0) {
      const nlohmann::json j = nlohmann::json::parse(text);  // kept: a range-for over a temporary's member dangles
      for (const auto& l : j["losses"]) got.push_back(l.get<double>());
    }
    EXPECT_EQ(got.size(), 2u) << layout << "\n" << text;
    return got;
  };
  const std::vector<double> one = losses(dir.string(), "--cluster h100:1x1");
  ASSERT_EQ(one.size(), 2u);
  for (const std::string layout : {"--cluster h100:1x2 --tp 2", "--cluster h100:1x2 --pp 2 --microbatches 2",
                                   "--cluster h100:1x2 --dp 2"}) {
    const std::vector<double> other = losses(dir.string(), layout);
    ASSERT_EQ(other.size(), 2u) << layout;
    for (int i = 0; i < 2; ++i) EXPECT_NEAR(other[i], one[i], 1e-5 * one[i]) << layout << " step " << i;
  }
  const std::vector<double> seeded = losses((dir / "config.json").string(), "--cluster h100:1x1");
  ASSERT_EQ(seeded.size(), 2u);
  EXPECT_GT(std::abs(seeded[0] - one[0]), 1e-3 * one[0]);  // the weights were read, not drawn
  // A folder whose weights are another model's is refused by name.
  nlohmann::json config = nlohmann::json::parse(std::ifstream(dir / "config.json"));
  config["intermediate_size"] = 48;
  std::ofstream(dir / "config.json") << config.dump();
  auto [code, text] = test::RunLoom("run --model " + dir.string() + data + " --cluster h100:1x1");
  EXPECT_EQ(code, 2) << text;
  EXPECT_NE(text.find("model.layers.0.mlp.up_proj.weight' is [96, 64] in the checkpoint, but the model makes it "
                      "[48, 64]"),
            std::string::npos)
      << text;
  // --save refuses, before any worker starts, what it cannot write or must not overwrite.
  const std::string run = "run --cluster h100:1x1" + data;
  const auto refused = [](const std::string& args, const std::vector<std::string>& parts) {
    auto [code, text] = test::RunLoom(args);
    EXPECT_EQ(code, 2) << text;
    for (const auto& p : parts) EXPECT_NE(text.find(p), std::string::npos) << p << "\n" << text;
  };
  refused(run + " --model gpt2-medium --save " + (dir / "out").string(),
          {"--save", "must come from one", "Loom model YAML"});
  refused(run + " --model " + dir.string() + " --save " + dir.string(),
          {"--save " + dir.string() + ": is also --model, an input", "no output overwrites an input"});
  refused(run + " --model " + (dir / "config.json").string() + " --save " + dir.string(),
          {"is the folder the model is read from", "no output overwrites an input"});
  fs::create_directories(dir / "mine");
  std::ofstream(dir / "mine" / "notes.txt") << "mine\n";
  refused(run + " --model " + dir.string() + " --save " + (dir / "mine").string(),
          {"the folder holds notes.txt, which a save does not write"});
  EXPECT_TRUE(fs::exists(dir / "mine" / "notes.txt"));
  // Runtime audit R4-01: a config that ties the head beside weights holding a
  // head of its own, which transformers does not tie (it warns and keeps
  // both): refused, naming the fix, rather than trained tied.
  config["intermediate_size"] = 96;
  const auto folder = [&](const std::string& name, const nlohmann::json& c) {
    const fs::path d = dir / name;
    fs::create_directories(d);
    std::ofstream(d / "config.json") << c.dump();
    return d;
  };
  nlohmann::json tied = config;
  tied["tie_word_embeddings"] = true;
  const fs::path tied_dir = folder("tied", tied);
  fs::copy_file(dir / "model.safetensors", tied_dir / "model.safetensors");
  refused(run + " --model " + tied_dir.string(),
          {"config.json ties the LM head to the embedding (tie_word_embeddings: true), but",
           "holds its own 'lm_head.weight', which differs: transformers would not tie them",
           "Set tie_word_embeddings: false"});
  // R4-03/R4-04: weights that are there but cannot be read trained from the
  // seed without a word (a dangling link, a folder, a pipe; a pickle only).
  const fs::path dangling = folder("dangling", config);
  fs::create_symlink("/nonexistent/model.safetensors", dangling / "model.safetensors");
  refused(run + " --model " + dangling.string(), {"model.safetensors: a dangling symbolic link; expected the model's"});
  const fs::path piped = folder("piped", config);
  ASSERT_EQ(::mkfifo((piped / "model.safetensors").c_str(), 0600), 0);
  refused(run + " --model " + piped.string(), {"model.safetensors: a pipe (FIFO)"});
  const fs::path pickled = folder("pickled", config);
  std::ofstream(pickled / "pytorch_model.bin") << "not read";
  refused(run + " --model " + pickled.string(),
          {"holds pytorch_model.bin but no model.safetensors", "Loom reads safetensors weights only"});
}

// `loom run --model DIR --data FILE.jsonl`: real token ids and labels, the
// loss as transformers computes it (labels shifted, -100 ignored, the mean over
// the batch's scored tokens), and one AdamW step as torch.optim.AdamW takes it
// (lr 0.01, betas 0.9/0.999, eps 1e-8, weight decay 0.01): the loss before and
// after the step equal transformers' under one process, TP 2, PP 2, DP 2
// (ZeRO 1, 2 and 3) and CP 2. What `--save` writes after the second step
// loads in transformers with the weights and logits transformers trained.
const char* kTrainReference = R"(
import json, sys, torch
import transformers
d = sys.argv[1]
model = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
model.train()
torch.manual_seed(1)
samples = []
for n in (9, 6, 12, 5):
    ids = torch.randint(0, 128, (n,)).tolist()
    labels = list(ids)
    if n == 12:
        labels[2:5] = [-100] * 3  # a prompt the loss ignores
    samples.append({"input_ids": ids, "labels": labels})
with open(d + "/data.jsonl", "w") as f:
    for s in samples:
        f.write(json.dumps(s) + "\n")
)";

TEST(HfParity, TrainingOnTokenizedDataEqualsTransformersUnderEveryLayout) {
  // A Qwen2 with tied word embeddings and a vocabulary of 131, which TP 2
  // splits 65 + 66 (the embedding, the head and the loss by vocabulary rows;
  // under TP 2 x PP 2 the head's stage holds its own rows of the tied copy),
  // a Llama with every bias (row-parallel ones added after the reduce) and a
  // Qwen3 (q/k norms whose gradients sum over the TP group, head_dim 32; the
  // bad-data checks below use its folder).
  const std::vector<std::pair<std::string, std::string>> families = {
      {"qwen2", R"('{"tie_word_embeddings": true, "vocab_size": 131}')"},
      {"llama", R"('{"attention_bias": true, "mlp_bias": true}')"},
      {"qwen3", R"('{"head_dim": 32}')"}};
  fs::path dir;
  for (const auto& [family, overrides] : families) {
    SCOPED_TRACE(family);
    dir = fs::temp_directory_path() / "loom_tests" / ("hf_data_" + family + "_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    auto [rc, out] = test::RunPython(kMakeReference, family + " " + dir.string() + " " + overrides);
    ASSERT_EQ(rc, 0) << out;
    std::tie(rc, out) = test::RunPython(std::string(kTrainReference) + kTwoAdamWSteps, dir.string());
    ASSERT_EQ(rc, 0) << out;
    const nlohmann::json expected = nlohmann::json::parse(out.substr(out.rfind('[')));
    const std::string base = "run --model " + dir.string() + " --data " + (dir / "data.jsonl").string() +
                             " --global-batch 4 --steps 2 --lr 0.01 --precision fp32 --json ";
    std::vector<std::string> saved, layouts = {"--cluster h100:1x1",
                                               "--cluster h100:1x2 --tp 2",
                                               "--cluster h100:1x2 --pp 2 --microbatches 2",
                                               "--cluster h100:1x2 --dp 2",
                                               "--cluster h100:1x2 --dp 2 --zero-stage 2",
                                               "--cluster h100:1x2 --dp 2 --zero-stage 3",
                                               "--cluster h100:1x2 --cp 2"};
    if (family == "qwen2") {  // tied: both copies' stages shard their AdamW state at ZeRO-1
      layouts.push_back("--cluster h100:1x4 --tp 2 --pp 2 --microbatches 2");
      layouts.push_back("--cluster h100:1x4 --pp 2 --dp 2 --zero-stage 1 --microbatches 2");
    }
    for (const std::string& layout : layouts) {
      SCOPED_TRACE(layout);
      saved.push_back((dir / ("saved" + std::to_string(saved.size()))).string());
      auto [code, text] = test::RunLoom(base + layout + " --save " + saved.back());
      ASSERT_EQ(code, 0) << text;
      EXPECT_FALSE(fs::exists(fs::path(saved.back()) / ".loom-save-parts")) << "the parts are removed once joined";
      EXPECT_TRUE(fs::exists(fs::path(saved.back()) / "config.json"));
      const nlohmann::json j = nlohmann::json::parse(text);
      for (int step = 0; step < 2; ++step) {
        const double want = expected[step].get<double>();
        EXPECT_NEAR(j["losses"][step].get<double>(), want, 1e-5 * want) << "step " << step;
      }
    }
    ExpectSavedLikeTransformers(dir, saved);
  }
  // Bad data is named: a token past the vocabulary, labels of another length.
  std::ofstream(dir / "bad.jsonl") << R"({"input_ids": [1, 2, 300]})" << "\n";
  auto [code1, text1] = test::RunLoom("run --model " + dir.string() + " --data " + (dir / "bad.jsonl").string() +
                                      " --global-batch 1 --steps 1 --cluster h100:1x1");
  EXPECT_EQ(code1, 2) << text1;
  EXPECT_NE(text1.find("bad.jsonl:1: input_ids[2] is 300, past the model's vocabulary of 128"), std::string::npos)
      << text1;
  // Every line is checked before any worker starts, not only those a step
  // draws: one step of one sample draws one of these 41 lines.
  {
    std::ofstream deep(dir / "bad.jsonl");
    for (int i = 0; i < 40; ++i)
      deep << R"({"input_ids": [1, 2, 3]})"
           << "\n";
    deep << R"({"input_ids": [1, 2, 3], "labels": [1, 2, 300]})"
         << "\n";
  }
  auto [code_deep, text_deep] =
      test::RunLoom("run --model " + dir.string() + " --data " + (dir / "bad.jsonl").string() +
                    " --global-batch 1 --steps 1 --cluster h100:1x1");
  EXPECT_EQ(code_deep, 2) << text_deep;
  EXPECT_NE(text_deep.find("loom: error: " + (dir / "bad.jsonl").string() +
                           ":41: labels[2] is 300, past the LM head's vocabulary of 128"),
            std::string::npos)
      << text_deep;
  EXPECT_EQ(text_deep.find("rank 0"), std::string::npos) << "said by the launcher, not a worker\n" << text_deep;
  std::ofstream(dir / "bad.jsonl") << R"({"input_ids": [1, 2, 3], "labels": [1, 2]})" << "\n";
  auto [code2, text2] = test::RunLoom("run --model " + dir.string() + " --data " + (dir / "bad.jsonl").string() +
                                      " --global-batch 1 --steps 1 --cluster h100:1x1");
  EXPECT_EQ(code2, 2) << text2;
  EXPECT_NE(text2.find("bad.jsonl:1: labels: 2 entries for 3 input_ids"), std::string::npos) << text2;
  // A tensor no layer reads (transformers' unused weights) is named, and the run goes on (D62): the
  // two pipeline stages' processes each read their half, and only the stray one is left.
  const fs::path extra = dir / "extra";
  fs::create_directories(extra);
  fs::copy_file(dir / "config.json", extra / "config.json", fs::copy_options::overwrite_existing);
  {
    const weights::CheckpointWeights checkpoint(dir.string());
    std::deque<std::vector<std::byte>> hold;
    std::vector<weights::TensorToWrite> tensors;
    for (const std::string& name : checkpoint.Names()) {
      const weights::CheckpointWeights::Location& at = checkpoint.At(name);
      hold.emplace_back(at.tensor->bytes());
      at.file->Read(*at.tensor, hold.back());
      tensors.push_back({name, at.tensor->dtype, at.tensor->shape, hold.back()});
    }
    const std::array<float, 1> one = {1.0f};
    tensors.push_back({"model.stray.weight", weights::DType::kF32, {1}, std::as_bytes(std::span<const float>(one))});
    weights::WriteCheckpointWeights(extra.string(), tensors, uint64_t{1} << 40);
  }
  auto [code3, text3] = test::RunLoom("run --model " + extra.string() + " --data " + (dir / "data.jsonl").string() +
                                      " --global-batch 4 --steps 1 --cluster h100:1x2 --pp 2");
  EXPECT_EQ(code3, 0) << text3;
  EXPECT_NE(text3.find("1 tensor(s) of the checkpoint no layer reads (a LLaVA's vision layers past its feature "
                       "layer, or another model's; --save keeps them as they are): model.stray.weight\n"),
            std::string::npos)
      << text3;
}

// The training loop's parts against transformers' and PyTorch's own: a
// warmup and cosine schedule to a minimum (get_cosine_with_min_lr_schedule_with_warmup),
// AdamW's decay on matrices and embeddings only, the gradients clipped by
// their global norm (clip_grad_norm_, tight enough to clip every step). Four
// steps on the four samples; each step's loss, its norm before clipping and
// its learning rate equal transformers' under one process, TP 2, PP 2, DP 2
// with ZeRO 0-3, and CP 2: the global norm counts TP-replicated tensors (the
// norms, the row-parallel biases) and every data-parallel and CP copy once.
const char* kTrainingLoopReference = R"(
params = [p for p in model.parameters() if p.requires_grad]
opt = torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
                         {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}], lr=0.01)
sched = transformers.get_cosine_with_min_lr_schedule_with_warmup(opt, num_warmup_steps=2, num_training_steps=4,
                                                                  min_lr_rate=0.1)
out = {"losses": [], "grad_norms": [], "lrs": []}
for step in range(4):
    total, count = 0.0, 0
    for s in samples:
        logits = model(input_ids=torch.tensor([s["input_ids"]])).logits[0, :-1]
        target = torch.tensor(s["labels"][1:])
        total = total + torch.nn.functional.cross_entropy(logits, target, ignore_index=-100, reduction="sum")
        count += int((target != -100).sum())
    l = total / count
    l.backward()
    out["losses"].append(l.item())
    out["grad_norms"].append(torch.nn.utils.clip_grad_norm_(params, 0.05).item())
    out["lrs"].append(opt.param_groups[0]["lr"])
    opt.step()
    sched.step()
    opt.zero_grad()
print(json.dumps(out))
)";

TEST(HfParity, TrainingLoopEqualsTransformersUnderEveryLayout) {
  const fs::path dir = fs::temp_directory_path() / "loom_tests" / ("hf_loop_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto [rc, out] =
      test::RunPython(kMakeReference, "llama " + dir.string() + R"( '{"attention_bias": true, "mlp_bias": true}')");
  ASSERT_EQ(rc, 0) << out;
  std::tie(rc, out) = test::RunPython(std::string(kTrainReference) + kTrainingLoopReference, dir.string());
  ASSERT_EQ(rc, 0) << out;
  const nlohmann::json want = nlohmann::json::parse(out.substr(out.rfind('{')));
  // Clipping acts every step (else the norm would not be checked through the weights).
  for (const auto& n : want["grad_norms"]) ASSERT_GT(n.get<double>(), 0.05);
  const std::string base = "run --model " + dir.string() + " --data " + (dir / "data.jsonl").string() +
                           " --global-batch 4 --steps 4 --precision fp32 --json --lr 0.01 --lr-schedule cosine "
                           "--warmup-steps 2 --min-lr-ratio 0.1 --weight-decay 0.1 --clip-grad 0.05 ";
  for (const std::string layout :
       {"--cluster h100:1x1", "--cluster h100:1x2 --tp 2", "--cluster h100:1x2 --pp 2 --microbatches 2",
        "--cluster h100:1x2 --dp 2 --zero-stage 0", "--cluster h100:1x2 --dp 2 --zero-stage 1",
        "--cluster h100:1x2 --dp 2 --zero-stage 2", "--cluster h100:1x2 --dp 2 --zero-stage 3",
        "--cluster h100:1x2 --cp 2"}) {
    SCOPED_TRACE(layout);
    auto [code, text] = test::RunLoom(base + layout);
    ASSERT_EQ(code, 0) << text;
    const nlohmann::json j = nlohmann::json::parse(text);
    for (int step = 0; step < 4; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      for (const char* key : {"losses", "grad_norms", "lrs"}) {
        const double w = want[key][step].get<double>();
        EXPECT_NEAR(j[key][step].get<double>(), w, 1e-5 * std::max(1e-3, std::abs(w))) << key;
      }
    }
  }
}

}  // namespace
}  // namespace loom
