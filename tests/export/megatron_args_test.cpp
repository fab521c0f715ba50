// `--export megatron` in current Megatron-LM's terms (issue 22): the exact
// stage contents as --pipeline-model-parallel-layout (counted here from the
// plan's stages), interleaving only across ranks, freezing flags, the MIMO
// example's rank grids for an encoder and an LLM on their own GPUs, and a
// reason for everything else.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "../plan/plan_test_util.h"
#include "loom/export/megatron_args.h"
#include "loom/export/megatron_rules.h"
#include "loom/strategies/baselines/megatron_config.h"
#include "test_util.h"

namespace loom {
namespace {

// The layout string of a plan's stages, counted from its layer ranges: the
// backbone's embedding E, each transformer layer t, the head L.
std::string CountedLayout(const Plan& plan, const Model& model) {
  std::string out;
  const auto& stages = plan.units[0].pipelines[0].stages;
  for (size_t s = 0; s < stages.size(); ++s) {
    std::string part;
    int t = 0;
    for (const auto& r : stages[s].layers) {
      const Module& m = model.modules[model.FindModule(r.module)];
      if (m.role != ModuleRole::kBackbone) continue;
      for (int l = r.begin; l < r.end; ++l) {
        if (m.layers[l].kind == LayerKind::kTransformer) {
          ++t;
          continue;
        }
        if (t > 0) part += t == 1 ? "t" : fmt::format("t*{}", t);
        t = 0;
        part += m.layers[l].kind == LayerKind::kEmbedding ? "E" : "L";
      }
    }
    if (t > 0) part += t == 1 ? "t" : fmt::format("t*{}", t);
    out += (s == 0 ? "" : "|") + part;
  }
  return out;
}

TEST(MegatronExport, LayoutHoldsThePlansExactStagesWithInterleaving) {
  const Model model = LoadModel("llama3-8b");
  Workload w = LoadWorkload("text");
  w.global_batch = 16;
  const Cluster c = MakeCluster("h100", 1, 8);
  const Batch batch = DrawBatch(w, 0);
  ParallelConfig cfg;
  cfg.tp = 2;
  cfg.pp = 2;
  cfg.dp = 2;
  cfg.vpp = 3;
  cfg.microbatches = 4;
  cfg.schedule = ScheduleKind::kInterleaved;
  const Plan plan = MegatronConfigPlan({model, c, w, batch, {}}, cfg);
  const MegatronExport e = ExportMegatron(plan, model);
  ASSERT_TRUE(e.expressible) << e.notes;
  const std::string layout = CountedLayout(plan, model);
  EXPECT_EQ(std::count(layout.begin(), layout.end(), '|'), 5);  // pp x vpp = 6 stages
  EXPECT_EQ(layout.front(), 'E');
  EXPECT_EQ(layout.back(), 'L');
  EXPECT_NE(e.args.find("--pipeline-model-parallel-layout \"" + layout + "\""), std::string::npos) << e.args;
  EXPECT_NE(e.args.find("--tensor-model-parallel-size 2"), std::string::npos);
  EXPECT_NE(e.args.find("--pipeline-model-parallel-size 2"), std::string::npos);
  EXPECT_NE(e.args.find("--micro-batch-size 2"), std::string::npos);  // 16 / (dp 2 x 4 microbatches)
  // The removed flags are gone; so is the old per-model layer average.
  EXPECT_EQ(e.args.find("num-layers-per-virtual-pipeline-stage"), std::string::npos);
  EXPECT_EQ(e.args.find("--encoder-"), std::string::npos);
  EXPECT_NE(e.notes.find("core 0.13"), std::string::npos);
}

TEST(MegatronExport, InterleavingOnOneRankAndEncoderOnlyStagesAreRefused) {
  test::Fixture f;
  // vlm-s on PipeWeaver's shape: vpp 2 on a single pipeline rank.
  Plan one_rank =
      SingleUnitPlan(f.ctx(), "pw", 4, 1, 4, 2, 4, ScheduleKind::kInterleaved, Recompute::kFull, Balance::kParams, 1);
  const MegatronExport e1 = ExportMegatron(one_rank, f.model);
  EXPECT_FALSE(e1.expressible);
  EXPECT_NE(e1.notes.find("interleaves 2 chunks on a single pipeline rank"), std::string::npos) << e1.notes;
  // `loom simulate`'s flags refuse it as Megatron-LM does.
  ParallelConfig cfg;
  cfg.tp = 4;
  cfg.dp = 4;
  cfg.vpp = 2;
  cfg.microbatches = 4;
  cfg.schedule = ScheduleKind::kInterleaved;
  test::ExpectError([&] { cfg.Validate(f.model, f.cluster, f.workload); }, {"--vpp 2 needs --pp >= 2"});
  // pp 4 balanced by parameters: the ViT fills the first stages on its own.
  Plan encoder_stages =
      SingleUnitPlan(f.ctx(), "m", 4, 4, 1, 1, 4, ScheduleKind::kOneFOneB, Recompute::kFull, Balance::kParams, 1);
  const std::string counted = CountedLayout(encoder_stages, f.model);
  ASSERT_EQ(counted.substr(0, 1), "|") << counted;  // stage 0 holds no LLM layer
  const MegatronExport e2 = ExportMegatron(encoder_stages, f.model);
  EXPECT_FALSE(e2.expressible);
  EXPECT_NE(e2.notes.find("hold no LLM layer (encoders only)"), std::string::npos) << e2.notes;
}

TEST(MegatronExport, EncoderAndLlmOnTheirOwnGpusAreTheMimoGrids) {
  test::Fixture f;
  const MegatronExport e = ExportMegatron(test::DisaggregatedShape(f), f.model);
  ASSERT_TRUE(e.expressible) << e.notes;
  // Encoder on groups 0-1 (tp 4, 2 replicas), LLM from group 2 (GPU 8), tp 4, pp 1, 2 replicas.
  for (const char* arg : {"--encoder-tp 4", "--encoder-dp 2", "--llm-offset 8", "--llm-tp 4", "--llm-pp 1",
                          "--llm-dp 2", "--micro-batch-size 2", "--global-batch-size 16"}) {
    EXPECT_NE(e.args.find(arg), std::string::npos) << arg << "\n" << e.args;
  }
  EXPECT_NE(e.notes.find("MIMO example"), std::string::npos);
  EXPECT_NE(e.notes.find("the LLM on GPUs 8..15"), std::string::npos) << e.notes;
  // Its model provider builds a hybrid Mamba LLM (audit M6-05); its imports need the module form (M6-08).
  EXPECT_NE(e.notes.find("builds a hybrid Mamba LLM from --hybrid-layer-pattern"), std::string::npos) << e.notes;
  EXPECT_NE(FormatMegatronExport("mmscale", e, 8).find(" -m examples.mimo.pretrain_mimo"), std::string::npos);
}

TEST(MegatronExport, FrozenModulesBecomeFreezeFlags) {
  test::Fixture f;
  Model frozen = f.model;
  for (auto& m : frozen.modules) {
    if (m.role == ModuleRole::kBackbone || m.name == "vision") {
      for (auto& l : m.layers) l.frozen = true;
    }
  }
  Plan p = SingleUnitPlan(f.ctx(), "m", 4, 1, 4, 1, 4, ScheduleKind::kOneFOneB, Recompute::kFull, Balance::kParams, 1);
  const MegatronExport e = ExportMegatron(p, frozen);
  ASSERT_TRUE(e.expressible) << e.notes;
  EXPECT_NE(e.args.find("--freeze-LM"), std::string::npos) << e.args;
  EXPECT_NE(e.args.find("--freeze-ViT"), std::string::npos) << e.args;
  // pretrain_vlm.py asserts the legacy checkpoint format (audit M6-02).
  EXPECT_NE(e.args.find("--ckpt-format torch"), std::string::npos) << e.args;
}

// pretrain_vlm.py's LLM sequence is --seq-length text tokens plus one image's
// embeddings (model_provider: decoder_seq_length = dataloader_seq_length +
// get_num_image_embeddings), so --seq-length is the plan's sequence less
// them; the image flags give its CLIP encoder the model's image size, patch
// and layers. vlm-s's ViT takes 768 px images in 14 px patches (2916) and
// hands the LLM 169 pooled tokens, which pretrain_vlm.py's CLIP cannot: said.
TEST(MegatronExport, AVlmsSequenceIsTextTokensPlusItsImageEmbeddings) {
  test::Fixture f;
  const Module& vision = f.model.modules[f.model.FindModule("vision")];
  const int64_t side = vision.tokens.resize_px, patch = vision.tokens.patch_px;
  ASSERT_GT(side, 0);
  ASSERT_GT(patch, 0);
  const int64_t patches = (side / patch) * (side / patch);
  Plan p = SingleUnitPlan(f.ctx(), "m", 4, 1, 4, 1, 4, ScheduleKind::kOneFOneB, Recompute::kFull, Balance::kParams, 1);
  MegatronTarget target;
  target.seq_len = 8192;
  const MegatronExport e = ExportMegatron(p, f.model, target);
  ASSERT_TRUE(e.expressible) << e.notes;
  int layers = 0;
  for (const Layer& l : vision.layers) layers += l.kind == LayerKind::kTransformer ? 1 : 0;
  const bool class_token = vision.tokens.extra_tokens > vision.tokens.drop_tokens;
  const int64_t embeddings = patches + (class_token ? 1 : 0);
  for (const std::string& arg :
       {fmt::format("--img-h {}", side), fmt::format("--img-w {}", side), fmt::format("--patch-dim {}", patch),
        fmt::format("--encoder-num-layers {}", layers), fmt::format("--seq-length {}", 8192 - embeddings)}) {
    EXPECT_NE(e.args.find(arg), std::string::npos) << arg << "\n" << e.args;
  }
  EXPECT_EQ(e.args.find("--disable-vision-class-token") != std::string::npos, !class_token) << e.args;
  EXPECT_EQ(embeddings, 2916);
  EXPECT_NE(e.notes.find("pretrain_vlm.py's CLIP encoder hands the LLM 2916 embeddings an image (no merge or "
                         "tiling), where vision hands on 169"),
            std::string::npos)
      << e.notes;
  EXPECT_NE(
      e.notes.find(fmt::format("one image ({} embeddings) before the {} text tokens", embeddings, 8192 - embeddings)),
      std::string::npos)
      << e.notes;
}

// Audit M6-04 and M6-06: pretrain_vlm.py's vision encoder copies the
// language model's layout, so a VLM plan of several pipeline stages is
// refused, saying why.
TEST(MegatronExport, AVlmOfSeveralStagesIsRefusedForPretrainVlm) {
  test::Fixture f;
  Plan staged =
      SingleUnitPlan(f.ctx(), "m", 4, 2, 2, 1, 4, ScheduleKind::kOneFOneB, Recompute::kFull, Balance::kParams, 1);
  const MegatronExport e = ExportMegatron(staged, f.model);
  EXPECT_FALSE(e.expressible);
  EXPECT_NE(e.notes.find("pretrain_vlm.py builds its vision encoder from a copy of the language model's config"),
            std::string::npos)
      << e.notes;
}

// Audit M6-01, M6-03, M6-13: what a launch needs to train and what the
// parser reads: a learning rate, no validation passes, the rotary base as an
// integer, Llama 3's scaling and a norm eps other than Megatron-LM's.
TEST(MegatronExport, TheLaunchTrainsTheModelsShape) {
  Model model = LoadModel("llama3-8b");
  for (Layer& l : model.modules[0].layers) {
    if (l.kind != LayerKind::kTransformer) continue;
    l.rope.theta = 1e6;
    l.rope.scaling = RopeScaling::kLlama3;
    l.rope.factor = 32;
    l.norm = NormKind::kRmsNorm;
    l.norm_eps = 1e-6;
  }
  Workload w = LoadWorkload("text");
  w.global_batch = 16;
  const Cluster c = MakeCluster("h100", 2, 8);
  ParallelConfig cfg;
  cfg.tp = 2;
  cfg.dp = 8;
  cfg.microbatches = 1;
  const Plan plan = MegatronConfigPlan({model, c, w, DrawBatch(w, 0), {}}, cfg);
  const MegatronExport e = ExportMegatron(plan, model);
  ASSERT_TRUE(e.expressible) << e.notes;
  for (const char* arg : {"--rotary-base 1000000", "--use-rope-scaling", "--rope-scaling-factor 32",
                          "--normalization RMSNorm", "--norm-epsilon 1e-06", "--lr 0.0003", "--eval-iters 0"}) {
    EXPECT_NE(e.args.find(arg), std::string::npos) << arg << "\n" << e.args;
  }
  // The MLP's activation as Megatron-LM's flags give it (audit M6-11): quick
  // GELU gated is --quick-geglu; GELU gated has no flag (--swiglu would run SiLU).
  Model quick = model, geglu = model;
  for (Model* m : {&quick, &geglu}) {
    for (Layer& l : m->modules[0].layers) l.activation = m == &quick ? Activation::kQuickGelu : Activation::kGelu;
  }
  const MegatronExport q = ExportMegatron(plan, quick);
  ASSERT_TRUE(q.expressible) << q.notes;
  EXPECT_NE(q.args.find("--quick-geglu"), std::string::npos) << q.args;
  EXPECT_EQ(q.args.find("--swiglu"), std::string::npos) << q.args;
  const MegatronExport g = ExportMegatron(plan, geglu);
  EXPECT_FALSE(g.expressible);
  EXPECT_NE(g.notes.find("its LLM's gated MLP uses gelu; Megatron-LM's flags give a gated MLP SiLU (--swiglu) or "
                         "quick GELU (--quick-geglu)"),
            std::string::npos)
      << g.notes;
  // The mock run's vocabulary is the plan's: NullTokenizer adds its
  // end-of-document id and Megatron-LM pads to --make-vocab-size-divisible-by
  // x TP (MegatronModelVocab), so --vocab-size is V - 1 with a divisor that
  // needs no padding: 128256 at TP 2 is 501 x 256.
  EXPECT_NE(e.args.find("--make-vocab-size-divisible-by 128"), std::string::npos) << e.args;
  EXPECT_NE(e.args.find("--vocab-size 128255"), std::string::npos) << e.args;
  EXPECT_EQ(MegatronModelVocab(128255, 128, 2), 128256);
  EXPECT_EQ(MegatronModelVocab(128256, 128, 1), 128384);  // --vocab-size V: 128 rows more
  // A vocabulary TP does not divide (GPT-2's 50257 at TP 2): padded by one row, said.
  Model gpt2 = model;
  for (Layer& l : gpt2.modules[0].layers) {
    if (l.kind == LayerKind::kEmbedding || l.kind == LayerKind::kLmHead) l.vocab = 50257;
  }
  const MegatronExport odd = ExportMegatron(plan, gpt2);
  ASSERT_TRUE(odd.expressible) << odd.notes;
  EXPECT_NE(odd.args.find("--make-vocab-size-divisible-by 1"), std::string::npos) << odd.args;
  EXPECT_NE(odd.args.find("--vocab-size 50256"), std::string::npos) << odd.args;
  EXPECT_NE(odd.notes.find("Megatron-LM pads the vocabulary of 50257 to 50258 (a multiple of TP 2): 1 more rows"),
            std::string::npos)
      << odd.notes;
  // Qwen2's 151936 at TP 8 divides by 128 x 8 no further than 16 x 8.
  Model qwen = model;
  for (Layer& l : qwen.modules[0].layers) {
    if (l.kind == LayerKind::kEmbedding || l.kind == LayerKind::kLmHead) l.vocab = 151936;
  }
  ParallelConfig tp8 = cfg;
  tp8.tp = 8;
  tp8.dp = 2;
  const MegatronExport q8 = ExportMegatron(MegatronConfigPlan({qwen, c, w, DrawBatch(w, 0), {}}, tp8), qwen);
  ASSERT_TRUE(q8.expressible) << q8.notes;
  EXPECT_NE(q8.args.find("--make-vocab-size-divisible-by 16"), std::string::npos) << q8.args;
  EXPECT_EQ(MegatronModelVocab(151935, 16, 8), 151936);
  // Two nodes: every node's torchrun needs the rendezvous (audit M6-12).
  const std::string text = FormatMegatronExport("megatron", e, 8);
  EXPECT_NE(text.find("torchrun --nnodes 2 --nproc-per-node 8 --node-rank $NODE_RANK --master-addr $MASTER_ADDR "
                      "--master-port 29500 pretrain_gpt.py"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace loom
