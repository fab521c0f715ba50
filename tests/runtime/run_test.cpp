// `loom run` against the single-process reference (issue 14, first step):
// a 4-layer LLM trained for 3 steps over a 2-rank pipeline (c10d Gloo, one
// process per rank) under GPipe, 1F1B, interleaved and ZB-H1, with 2
// data-parallel replicas, tensor parallelism 2, recomputation and frozen
// layers, ends with the losses and parameters of plain training
// on the same samples, microbatch by microbatch in one process. A killed rank fails the run naming it, within the
// timeout; what the runtime cannot run yet is an error naming it.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include <fmt/format.h>
#include "loom/cost/profile.h"
#include "loom/data/sample_source.h"
#include "loom/plan/plan_json.h"
#include "loom/runtime/torch_model.h"
#include "loom/spec/cluster.h"
#include "loom/spec/model.h"
#include "loom/spec/workload.h"
#include "loom/strategies/plan_builders.h"

#include "reference.h"
#include "test_util.h"

namespace loom {
namespace {

using namespace runtime_test;

// Pipelines of 2 ranks under every schedule, then data parallelism: 2 replicas of
// a 2-rank pipeline (4 processes) and 2 replicas of one rank, each replica taking
// one sample of every 2-sample microbatch; recomputation, TP, frozen layers.
TEST(Runtime, EverySchedulesPipelineEqualsSingleProcessTraining) {
  ExpectRunsLikeTheReference(
      TinyRun(), {Case{"gpipe", ScheduleKind::kGpipe, 1, 2, 1}, Case{"1f1b", ScheduleKind::kOneFOneB, 1, 2, 1},
                  Case{"interleaved", ScheduleKind::kInterleaved, 2, 2, 1}, Case{"zb-h1", ScheduleKind::kZbH1, 1, 2, 1},
                  Case{"1f1b-dp2", ScheduleKind::kOneFOneB, 1, 2, 2}, Case{"dp2", ScheduleKind::kOneFOneB, 1, 1, 2},
                  Case{"1f1b-recompute", ScheduleKind::kOneFOneB, 1, 2, 1, Recompute::kFull},
                  Case{"interleaved-recompute", ScheduleKind::kInterleaved, 2, 2, 1, Recompute::kFull},
                  Case{"1f1b-tp2", ScheduleKind::kOneFOneB, 1, 2, 1, Recompute::kNone, 2},
                  Case{"tp2-dp2", ScheduleKind::kOneFOneB, 1, 1, 2, Recompute::kNone, 2},
                  Case{"interleaved-tp2-recompute", ScheduleKind::kInterleaved, 2, 2, 1, Recompute::kFull, 2},
                  // Data parallelism above shards the optimizer (ZeRO-1, Megatron's
                  // distributed optimizer); at ZeRO 0 every replica steps every weight.
                  Case{"1f1b-dp2-zero0", ScheduleKind::kOneFOneB, 1, 2, 2, Recompute::kNone, 1, 0},
                  // ZeRO-2 reduce-scatters the gradients; ZeRO-3 (FSDP) also gathers
                  // the weights around every compute action, 4 microbatches in flight.
                  Case{"1f1b-dp2-zero2", ScheduleKind::kOneFOneB, 1, 2, 2, Recompute::kNone, 1, 2},
                  Case{"1f1b-dp2-zero3", ScheduleKind::kOneFOneB, 1, 2, 2, Recompute::kNone, 1, 3},
                  Case{"zb-h1-dp2-zero3-recompute", ScheduleKind::kZbH1, 1, 2, 2, Recompute::kFull, 1, 3},
                  // Context parallelism 4: each 32-token causal sequence in 8 chunks.
                  Case{"cp4", ScheduleKind::kOneFOneB, 1, 1, 1, Recompute::kNone, 1, 1, 4}});
  ExpectRunsLikeTheReference(TinyRun(kFrozen), {Case{"1f1b-frozen", ScheduleKind::kOneFOneB, 1, 2, 1},
                                                Case{"gpipe-frozen-dp2", ScheduleKind::kGpipe, 1, 2, 2}});
}

// A ViT + projector + LLM on packed image-caption samples (several documents
// and images per sample, sequences of unequal lengths): every schedule, the
// stage boundary inside the encoder or the LLM, TP, DP, both recomputations,
// a frozen encoder; then two encoders whose outputs cross stages side by side
// into an LLM with a tied head.
TEST(Runtime, MultimodalPipelinesEqualSingleProcessTraining) {
  ExpectRunsLikeTheReference(
      TinyRun(kVlm, kLaion),
      {Case{"vlm-gpipe", ScheduleKind::kGpipe, 1, 2, 1}, Case{"vlm-1f1b-pp4", ScheduleKind::kOneFOneB, 1, 4, 1},
       Case{"vlm-interleaved", ScheduleKind::kInterleaved, 2, 2, 1}, Case{"vlm-zb-h1", ScheduleKind::kZbH1, 1, 2, 1},
       Case{"vlm-1f1b-dp2-selective", ScheduleKind::kOneFOneB, 1, 2, 2, Recompute::kSelective},
       Case{"vlm-zb-h1-tp2-full", ScheduleKind::kZbH1, 1, 2, 1, Recompute::kFull, 2},
       // Context parallelism: ring attention over packed sequences of unequal
       // lengths, bidirectional (ViT) and causal (LLM), across stages, with TP,
       // DP (gradients summed over dp x cp, ZeRO-3) and both recomputations.
       Case{"vlm-1f1b-cp2", ScheduleKind::kOneFOneB, 1, 2, 1, Recompute::kNone, 1, 1, 2},
       Case{"vlm-tp2-cp2-full", ScheduleKind::kOneFOneB, 1, 1, 1, Recompute::kFull, 2, 1, 2},
       Case{"vlm-dp2-cp2-selective-zero3", ScheduleKind::kOneFOneB, 1, 1, 2, Recompute::kSelective, 1, 3, 2}});
  ExpectRunsLikeTheReference(TinyRun(kVlmFrozen, kLaion), {Case{"vlm-frozen-1f1b", ScheduleKind::kOneFOneB, 1, 2, 1}});
  ExpectRunsLikeTheReference(TinyRun(kVlm2, kLaion), {Case{"vlm2-1f1b-pp3", ScheduleKind::kOneFOneB, 1, 3, 1},
                                                      Case{"vlm2-interleaved", ScheduleKind::kInterleaved, 2, 2, 1}});
}

// Every input the runtime embeds (tiny-omni: 2x2-merged image tokens, audio
// spectrogram patches, a 1-d conv stem and a second conv, video latent
// frames, samples missing some of them): stage boundaries inside and between
// the encoders, the split backward, TP, DP, and context parallelism (the
// second conv gathers its sequences whole).
TEST(Runtime, EveryInputKindEqualsSingleProcessTraining) {
  ExpectRunsLikeTheReference(
      TinyRun(kOmni, kOmniData),
      {Case{"omni-1f1b-pp2", ScheduleKind::kOneFOneB, 1, 2, 1}, Case{"omni-gpipe-pp4", ScheduleKind::kGpipe, 1, 4, 1},
       Case{"omni-zb-h1-dp2", ScheduleKind::kZbH1, 1, 2, 2},
       Case{"omni-tp2-full", ScheduleKind::kOneFOneB, 1, 1, 1, Recompute::kFull, 2},
       Case{"omni-cp2", ScheduleKind::kOneFOneB, 1, 1, 1, Recompute::kNone, 1, 1, 2}});
}

TEST(Runtime, AKilledRankFailsTheRunNamingItWithinTheTimeout) {
  const TinyRun s;
  const std::string plan = MegatronPlanFile(s, ScheduleKind::kOneFOneB, 1, "run-kill.json", 1, 2);
  const auto t0 = std::chrono::steady_clock::now();
  auto [code, out] = LoomCli("run --model " + kModel + " --cluster h100:1x2 " + kData + " --plan " + plan +
                             " --steps 3 --timeout 10 --kill-rank 1 --kill-step 1");
  const double took_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("run failed"), std::string::npos) << out;
  EXPECT_NE(out.find("rank 1"), std::string::npos) << out;
  EXPECT_NE(out.find("exited with code 17"), std::string::npos) << out;
  EXPECT_LT(took_s, 10 + 10 + 5);  // the timeout plus the launcher's backstop
}

// A plan file for another model or cluster is refused before any worker
// starts, naming what differs (it used to crash the launcher).
TEST(Runtime, APlanForAnotherModelOrClusterIsAnError) {
  const TinyRun s;
  const std::string plan = MegatronPlanFile(s, ScheduleKind::kOneFOneB, 1, "run-other.json", 1, 2);
  auto [code, out] = LoomCli("run --model " + kVlm2 + " --cluster h100:1x2 " + kData + " --plan " + plan);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("invalid plan"), std::string::npos) << out;
  EXPECT_NE(out.find("module vision is placed in 0 units"), std::string::npos) << out;
  auto [code2, out2] = LoomCli("run --model " + kModel + " --cluster h800:1x2 " + kData + " --plan " + plan);
  EXPECT_EQ(code2, 2) << out2;
  EXPECT_NE(out2.find("the plan was made for cluster 'h100:1x2'"), std::string::npos) << out2;
}

TEST(Runtime, WhatItCannotRunYetIsAnError) {
  const TinyRun s;
  // Context parallelism and sequence sharing in one group at once.
  const Cluster four = LoadCluster("h100:1x4");
  const Batch batch = DrawBatch(s.workload, 0);
  StrategyContext ctx{s.model, four, s.workload, batch, {}};
  Plan both = SingleUnitPlan(ctx, "megatron", 1, 1, 1, 1, kMicrobatches, ScheduleKind::kOneFOneB, Recompute::kNone,
                             Balance::kParams, 1);
  both.group_gpus = 4;
  both.units[0].cp = 2;
  const std::string plan = test::WriteTemp("run-cp-shared.json", PlanToJson(both).dump());
  auto [code, out] = LoomCli("run --model " + kModel + " --cluster h100:1x4 " + kData + " --plan " + plan);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("both at once is not run yet"), std::string::npos) << out;
  // A plan for another cluster.
  auto [code2, out2] =
      LoomCli("run --model vlm-s --cluster h800:2x8 --workload obelics --global-batch 16 --plan " + plan);
  EXPECT_EQ(code2, 2) << out2;
  // A model whose training state outgrows this machine failed in the
  // allocator inside every worker (runtime audit R4-12): named first, by its
  // file and what it needs. Parameters by hand: 64 x (4 h^2 + 2 h ffn + 2 h
  // of norms) + 2 x 1000 h (embedding and head) = 3,298,674,343,936.
  const std::string huge = test::WriteTemp("huge-llm.yaml", R"(model: huge
modules:
  - name: llm
    role: backbone
    modality: text
    tokens: {source: text}
    layers:
      - {kind: embedding, vocab: 1000, hidden: 65536}
      - {kind: transformer, count: 64, hidden: 65536, ffn_hidden: 262144, heads: 512, causal: true}
      - {kind: lm_head, vocab: 1000, hidden: 65536}
)");
  auto [code4, out4] = LoomCli("run --model " + huge +
                               " --cluster h100:1x1 --workload text --global-batch 2 "
                               "--seq-len 8 --steps 1");
  EXPECT_EQ(code4, 2) << out4;
  EXPECT_NE(out4.find("huge-llm.yaml: model huge has 3298674343936 parameters"), std::string::npos) << out4;
  EXPECT_NE(out4.find("of memory: a smaller model, or more machines"), std::string::npos) << out4;
  // CUDA on a machine without a GPU: refused before any process starts.
  if (access("/dev/nvidia0", F_OK) != 0) {
    auto [code3, out3] = LoomCli("run --model " + kModel + " --cluster h100:1x1 " + kData + " --device cuda");
    EXPECT_EQ(code3, 2) << out3;
    EXPECT_NE(out3.find("no GPU"), std::string::npos) << out3;
  }
}

// The run's trace is in the simulator's format: every compute action of the
// last step of every rank appears once, on the compute track, in order.
TEST(Runtime, TraceShowsWhatRanBesideThePrediction) {
  const TinyRun s;
  const std::string plan = MegatronPlanFile(s, ScheduleKind::kOneFOneB, 1, "run-trace.json", 1, 2);
  const std::string trace = test::WriteTemp("run.trace.json", "");
  const std::string timeline = test::WriteTemp("run.timeline.svg", "");
  auto [code, out] =
      LoomCli("run --model " + kModel + " --cluster h100:1x2 " + kData + " --plan " + plan +
              " --steps 2 --compare --json --trace " + trace + " --timeline " + timeline + " --profile roofline");
  ASSERT_EQ(code, 0) << out;
  {
    // The picture: the prediction's panel, then the run's, each a row per rank
    // with its 9 compute actions (4 F, 4 B, the optimizer step) drawn.
    std::ifstream svg_in(timeline);
    const std::string svg((std::istreambuf_iterator<char>(svg_in)), std::istreambuf_iterator<char>());
    const size_t sim = svg.find("simulated:"), ran = svg.find("measured by loom run");
    ASSERT_NE(sim, std::string::npos);
    ASSERT_NE(ran, std::string::npos);
    EXPECT_LT(sim, ran);
    auto count = [&](const std::string& what, size_t from, size_t to) {
      int n = 0;
      for (size_t at = svg.find(what, from); at < to; at = svg.find(what, at + 1)) ++n;
      return n;
    };
    EXPECT_EQ(count("<title>F", ran, svg.size()), 2 * 4);
    EXPECT_EQ(count("<title>F", sim, ran), 2 * 4);
  }
  const auto j = nlohmann::json::parse(out);
  EXPECT_GT(j["simulated_iteration_time_s"].get<double>(), 0);
  EXPECT_GT(j["measured_iteration_time_s"].get<double>(), 0);
  ASSERT_EQ(j["measured_busy_s"].size(), 2u);
  // Each process reports its peak resident memory: libtorch alone takes tens of MiB.
  ASSERT_EQ(j["peak_rss_bytes"].size(), 2u);
  for (const auto& b : j["peak_rss_bytes"]) EXPECT_GT(b.get<double>(), 16.0 * (1 << 20));
  std::ifstream in(trace);
  const auto t = nlohmann::json::parse(in);
  std::map<int, std::vector<std::string>> compute;  // pid -> compute action names in order of start
  std::map<int, double> last_start;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] != "X" || e["tid"] != 0) continue;
    const int pid = e["pid"];
    EXPECT_GE(e["ts"].get<double>(), last_start[pid]);
    last_start[pid] = e["ts"].get<double>();
    compute[pid].push_back(e["name"]);
  }
  // 4 microbatches, one stage per rank: 4 forwards, 4 backwards, then the optimizer step.
  for (int pid : {0, 1}) {
    ASSERT_EQ(compute[pid].size(), 9u) << pid;
    EXPECT_EQ(std::count_if(compute[pid].begin(), compute[pid].end(), [](const std::string& n) { return n[0] == 'F'; }),
              4);
    EXPECT_EQ(compute[pid].back(), "optimizer");
  }
}

// --kernel-trace: PyTorch's profiler over each process's last step, a Chrome
// trace per process. The step is there operator by operator: each process's
// AdamW is ATen's fused kernel, once per parameter group (decayed matrices,
// then norms' scales), and only the process holding the LM head ran the loss's
// log-softmax. A folder holding anything else, a file, or a run of one step
// (whose tensor bytes the profiler would keep from Loom's count) is refused.
TEST(Runtime, KernelTraceHoldsEveryOperatorOfTheLastStep) {
  const TinyRun s;
  const std::string plan = MegatronPlanFile(s, ScheduleKind::kOneFOneB, 1, "run-kernel-trace.json", 1, 2);
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / fmt::format("loom-ktrace-{}", getpid());
  std::filesystem::remove_all(dir);
  const std::string run =
      "run --model " + kModel + " --cluster h100:1x2 " + kData + " --plan " + plan + " --steps 2 --kernel-trace ";
  auto [code, out] = LoomCli(run + dir.string());
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("kernel traces of step 1: " + dir.string() + "/process-N.json"), std::string::npos) << out;
  for (int process : {0, 1}) {
    std::ifstream in(dir / fmt::format("process-{}.json", process));
    ASSERT_TRUE(in) << process;
    const auto t = nlohmann::json::parse(in);
    std::map<std::string, int> calls;
    for (const auto& e : t["traceEvents"]) {
      if (e.contains("name") && e.value("ph", "") == "X") ++calls[e["name"].get<std::string>()];
    }
    EXPECT_EQ(calls["aten::_fused_adamw_"], 2) << process;
    EXPECT_GT(calls["aten::mm"] + calls["aten::addmm"] + calls["aten::matmul"], 0) << process;
    EXPECT_EQ(calls["aten::log_softmax"] > 0, process == 1) << process;
  }
  // Again into the same folder: its earlier traces (and what became of them: gzipped, a cut-short save) go.
  std::ofstream(dir / "process-7.json.gz") << "old";
  std::ofstream(dir / "process-0.json.tmp.123") << "old";
  EXPECT_EQ(LoomCli(run + dir.string()).first, 0);
  EXPECT_FALSE(std::filesystem::exists(dir / "process-7.json.gz"));
  EXPECT_FALSE(std::filesystem::exists(dir / "process-0.json.tmp.123"));
  EXPECT_TRUE(std::filesystem::exists(dir / "process-1.json"));
  const std::string file = test::WriteTemp(fmt::format("ktrace-file-{}", getpid()), "x");
  auto [file_code, file_out] = LoomCli(run + file);
  EXPECT_EQ(file_code, 2) << file_out;
  EXPECT_NE(file_out.find("--kernel-trace " + file + ": exists and is not a folder"), std::string::npos) << file_out;
  // Its step's tensor bytes go uncounted (the profiler takes the slot), so one step is not enough.
  auto [one_code, one_out] = LoomCli("run --model " + kModel + " --cluster h100:1x2 " + kData + " --plan " + plan +
                                     " --steps 1 --kernel-trace " + dir.string());
  EXPECT_EQ(one_code, 2) << one_out;
  EXPECT_NE(one_out.find("give --steps 2 or more"), std::string::npos) << one_out;
  std::ofstream(dir / "notes.txt") << "mine";
  auto [foreign_code, foreign_out] = LoomCli(run + dir.string());
  EXPECT_EQ(foreign_code, 2) << foreign_out;
  EXPECT_NE(foreign_out.find("holds notes.txt, which a kernel trace does not write"), std::string::npos) << foreign_out;
  std::filesystem::remove_all(dir);
}

// Each process counts the bytes of its live tensors (runtime/tensor_memory.h):
// its stages' weights plus the peak of what the steps allocate. GPipe holds
// all 4 microbatches' activations on the first stage where 1F1B holds 2, so
// the first process measures more under GPipe, by at least a microbatch's
// worth of its stage's saved tensors; the simulator predicts the same order,
// and the measured peak is within a factor of 2 of the simulated one. The
// count is exact: two runs measure the same bytes.
TEST(Runtime, PeakTensorMemoryFollowsTheScheduleAndThePrediction) {
  const TinyRun s;
  auto measure = [&](ScheduleKind kind, const std::string& name) {
    const std::string plan = MegatronPlanFile(s, kind, 1, name, 1, 2);
    auto [code, out] = LoomCli("run --model " + kModel + " --cluster h100:1x2 " + kData + " --plan " + plan +
                               " --steps 2 --compare --json");
    EXPECT_EQ(code, 0) << out;
    const auto j = nlohmann::json::parse(out);
    std::vector<double> measured, simulated;
    for (const auto& b : j["peak_tensor_bytes"]) measured.push_back(b.get<double>());
    for (const auto& b : j["simulated_group_peak_mem_bytes"]) simulated.push_back(b.get<double>());
    return std::make_pair(measured, simulated);
  };
  const auto [gpipe, gpipe_sim] = measure(ScheduleKind::kGpipe, "mem-gpipe.json");
  const auto [ofob, ofob_sim] = measure(ScheduleKind::kOneFOneB, "mem-1f1b.json");
  ASSERT_EQ(gpipe.size(), 2u);
  ASSERT_EQ(ofob.size(), 2u);
  ASSERT_EQ(gpipe_sim.size(), 2u);
  std::printf(
      "peak tensor bytes, process 0 / 1: gpipe %.0f / %.0f (simulated %.0f / %.0f), 1f1b %.0f / %.0f "
      "(simulated %.0f / %.0f)\n",
      gpipe[0], gpipe[1], gpipe_sim[0], gpipe_sim[1], ofob[0], ofob[1], ofob_sim[0], ofob_sim[1]);
  EXPECT_GT(gpipe[0], ofob[0] * 1.05);
  EXPECT_GT(gpipe_sim[0], ofob_sim[0]);
  for (int p : {0, 1}) {
    EXPECT_GT(ofob[p], 0.9 * ofob_sim[p]) << p;
    EXPECT_LT(ofob[p], 1.1 * ofob_sim[p]) << p;
    EXPECT_GT(gpipe[p], 0.9 * gpipe_sim[p]) << p;
    EXPECT_LT(gpipe[p], 1.1 * gpipe_sim[p]) << p;
  }
  EXPECT_EQ(measure(ScheduleKind::kOneFOneB, "mem-1f1b-again.json").first, ofob);
}

// bf16 mixed precision (Megatron-LM's: fp32 master weights, gradients and
// AdamW state; bf16 copies and activations) under one process, TP 2, PP 2 with
// ZB-H1's split backward, DP 2 with ZeRO-3 and CP 2: each step's loss is the
// fp32 run's to bf16's rounding (relative 2e-3; measured <= 3e-4) but not
// equal to it (bf16 did run), and it falls as fp32's does. Peak tensor memory
// follows the bf16 prediction (18 B a parameter, 2 B activations).
TEST(Runtime, Bf16MixedPrecisionTrainsLikeFp32UnderEveryLayout) {
  const std::string base = "run --model " + kModel + " --workload text --global-batch 8 --seq-len 32 --steps 3 --json ";
  auto losses = [&](const std::string& args) {
    auto [code, out] = LoomCli(base + args);
    EXPECT_EQ(code, 0) << args << "\n" << out;
    std::vector<double> l;
    if (code == 0) {
      const auto j = nlohmann::json::parse(out);
      for (const auto& x : j["losses"]) l.push_back(x.get<double>());
    }
    return l;
  };
  const std::vector<double> fp32 = losses("--cluster h100:1x1 --precision fp32");
  ASSERT_EQ(fp32.size(), 3u);
  for (const std::string layout : {"--cluster h100:1x1", "--cluster h100:1x2 --tp 2",
                                   "--cluster h100:1x2 --pp 2 --schedule zb-h1 --microbatches 4",
                                   "--cluster h100:1x2 --dp 2 --zero-stage 3", "--cluster h100:1x2 --cp 2"}) {
    const std::vector<double> bf16 = losses(layout + " --precision bf16");
    ASSERT_EQ(bf16.size(), 3u) << layout;
    bool differs = false;
    for (int i = 0; i < 3; ++i) {
      EXPECT_NEAR(bf16[i], fp32[i], 2e-3 * fp32[i]) << layout << " step " << i;
      differs = differs || std::abs(bf16[i] - fp32[i]) > 1e-6;
    }
    EXPECT_TRUE(differs) << layout << ": the bf16 run's losses are fp32's to 1e-6: did it compute in bf16?";
    EXPECT_LT(bf16[2], bf16[0]) << layout;
  }
  // Four microbatches: the runtime frees the gradients at each step's end (as
  // transformers and PyTorch's zero_grad do) and allocates them in the step's
  // first backward, where the memory model keeps them as model state all along
  // (Megatron-LM's gradient buffers). Stage 0's peak, two microbatches kept
  // plus a backward's working set (cost/layer_work.h), then comes at its second
  // backward, when the gradients exist: 1.02x and 1.00x. With one or two
  // microbatches it comes before they exist and the prediction is high by up
  // to the working sets (two: 0.905x on stage 0; one: 0.88x on the head's).
  auto [code, out] = LoomCli(base + "--cluster h100:1x2 --pp 2 --microbatches 4 --precision bf16 --compare");
  ASSERT_EQ(code, 0) << out;
  const auto j = nlohmann::json::parse(out);
  for (int p : {0, 1}) {
    const double ratio = j["peak_tensor_bytes"][p].get<double>() / j["simulated_group_peak_mem_bytes"][p].get<double>();
    std::printf("bf16 pp 2 process %d: measured / simulated peak tensor bytes %.3f\n", p, ratio);
    EXPECT_GT(ratio, 0.9) << p;
    EXPECT_LT(ratio, 1.1) << p;
  }
}

// fp16 mixed precision with loss scaling (runtime/loss_scaler.h): under every
// layout each step's loss is the fp32 run's to fp16's rounding (relative
// 2e-4; measured <= 1e-5, bf16's is 2e-4), trained at the initial scale 2^16
// with no step skipped. A scale of
// 1e30 overflows fp16 in every backward: each step is skipped (the weights are
// those of a run of one skipped step, which are the initial ones) and the
// dynamic scale halves each time (hysteresis 1), or stays (--loss-scale).
// Loss-scale flags without fp16, and impossible scales, are refused.
TEST(Runtime, Fp16WithLossScalingTrainsLikeFp32UnderEveryLayout) {
  const std::string base = "run --model " + kModel + " --workload text --global-batch 8 --seq-len 32 --json ";
  auto run = [&](const std::string& args) {
    auto [code, out] = LoomCli(base + args);
    EXPECT_EQ(code, 0) << args << "\n" << out;
    return code == 0 ? nlohmann::json::parse(out) : nlohmann::json::object();
  };
  const std::vector<double> fp32 = run("--steps 3 --cluster h100:1x1 --precision fp32")["losses"];
  ASSERT_EQ(fp32.size(), 3u);
  for (const std::string layout : {"--cluster h100:1x1", "--cluster h100:1x2 --tp 2",
                                   "--cluster h100:1x2 --pp 2 --schedule zb-h1 --microbatches 4",
                                   "--cluster h100:1x2 --dp 2 --zero-stage 3", "--cluster h100:1x2 --cp 2"}) {
    const auto j = run("--steps 3 " + layout + " --precision fp16");
    ASSERT_TRUE(j.contains("losses")) << layout;
    const std::vector<double> fp16 = j["losses"];
    ASSERT_EQ(fp16.size(), 3u) << layout;
    bool differs = false;
    for (int i = 0; i < 3; ++i) {
      EXPECT_NEAR(fp16[i], fp32[i], 2e-4 * fp32[i]) << layout << " step " << i;
      differs = differs || std::abs(fp16[i] - fp32[i]) > 1e-7;
    }
    EXPECT_TRUE(differs) << layout << ": the fp16 run's losses are fp32's to 1e-7: did it compute in fp16?";
    EXPECT_LT(fp16[2], fp16[0]) << layout;
    EXPECT_EQ(j["loss_scales"], nlohmann::json({65536.0, 65536.0, 65536.0})) << layout;
    EXPECT_EQ(j["skipped_steps"], nlohmann::json::array()) << layout;
  }
  // Skipped under ZeRO-1 (its reduced slices), ZeRO-3 (weights released and
  // gathered again) and PP with ZB's deferred weight gradients.
  for (const std::string layout :
       {"--cluster h100:1x2 --dp 2 --zero-stage 1", "--cluster h100:1x2 --dp 2 --zero-stage 3",
        "--cluster h100:1x2 --pp 2 --schedule zb-h1 --microbatches 4"}) {
    const std::string overflowing = layout + " --precision fp16 ";
    const auto once = run("--steps 1 " + overflowing + "--initial-loss-scale 1e30 --hysteresis 1");
    const auto dynamic = run("--steps 3 " + overflowing + "--initial-loss-scale 1e30 --hysteresis 1");
    ASSERT_TRUE(once.contains("params") && dynamic.contains("params")) << layout;
    EXPECT_EQ(dynamic["loss_scales"], nlohmann::json({1e30, 5e29, 2.5e29})) << layout;
    EXPECT_EQ(dynamic["skipped_steps"], nlohmann::json({0, 1, 2})) << layout;
    EXPECT_EQ(dynamic["params"], once["params"]) << layout;                          // no step changed a weight
    EXPECT_NE(once["params"], run("--steps 1 " + overflowing)["params"]) << layout;  // a step not skipped does
  }
  const auto once = run("--steps 1 --cluster h100:1x1 --precision fp16 --loss-scale 1e30");
  const auto constant = run("--steps 3 --cluster h100:1x1 --precision fp16 --loss-scale 1e30");
  ASSERT_TRUE(once.contains("params") && constant.contains("params"));
  EXPECT_EQ(constant["loss_scales"], nlohmann::json({1e30, 1e30, 1e30}));
  EXPECT_EQ(constant["skipped_steps"], nlohmann::json({0, 1, 2}));
  EXPECT_EQ(constant["params"], once["params"]);
  for (const std::string bad : {"--precision bf16 --loss-scale 1024", "--precision fp16 --initial-loss-scale 0",
                                "--precision fp16 --loss-scale 1e40", "--precision fp16 --hysteresis 0"}) {
    auto [code, out] = LoomCli(base + "--steps 1 --cluster h100:1x1 " + bad);
    EXPECT_EQ(code, 2) << bad << "\n" << out;
    // --hysteresis is an int flag: its range is checked as the flag is read.
    const char* said = bad.find("bf16") != std::string::npos         ? "add --precision fp16"
                       : bad.find("hysteresis") != std::string::npos ? "--hysteresis: 0 is out of range"
                                                                     : "loss";
    EXPECT_NE(out.find(said), std::string::npos) << bad << "\n" << out;
  }
}

// `loom run --compare` of `plan` on `cluster` for 2 steps: per process, its
// peak tensor bytes over its GPU group's simulated peak (its replica's own,
// as the run's report pairs them; a group's `tp` processes are consecutive),
// of which there must be `groups` per replica. Empty if the run failed.
std::vector<double> PeakTensorRatios(const TinyRun& s, const std::string& plan, const std::string& name, size_t groups,
                                     const std::string& cluster = "h100:1x2", int tp = 1) {
  auto [code, out] = LoomCli("run --model " + s.model_path + " --cluster " + cluster + " " + s.data_args + " --plan " +
                             plan + " --steps 2 --compare --json");
  EXPECT_EQ(code, 0) << name << ": " << out;
  if (code != 0) return {};
  const auto j = nlohmann::json::parse(out);
  const auto measured = j["peak_tensor_bytes"], simulated = j["simulated_group_peak_mem_bytes"];
  std::vector<double> ratios;
  EXPECT_EQ(simulated.size(), groups) << name;
  if (simulated.empty()) return ratios;
  // Each data-parallel replica's own prediction (its share of the batch) where the run has one per group.
  const auto by_replica = j["simulated_replica_group_peak_mem_bytes"];
  const bool each = by_replica.size() * tp == measured.size();
  for (size_t p = 0; p < measured.size(); ++p) {
    ratios.push_back(measured[p].get<double>() /
                     (each ? by_replica[p / tp] : simulated[(p / tp) % simulated.size()]).get<double>());
  }
  return ratios;
}

// Each of `processes` ratios (PeakTensorRatios) within the 10% issue 41 asks for, printed.
void ExpectWithinTenPercent(const std::vector<double>& ratios, size_t processes, const std::string& what) {
  ASSERT_EQ(ratios.size(), processes) << what;
  for (size_t p = 0; p < processes; ++p) {
    std::printf("%s process %zu: measured / simulated peak tensor bytes %.3f\n", what.c_str(), p, ratios[p]);
    EXPECT_GT(ratios[p], 0.9) << what << " process " << p;
    EXPECT_LT(ratios[p], 1.1) << what << " process " << p;
  }
}

// Every runtime test model, PP 2 under 1F1B, with no, selective and full
// recomputation: each process's peak tensor memory against the simulator's
// prediction for its GPU group, within the 10% issue 41 asks for. The
// layers' kept bytes and backward working sets are exact
// (ActivationMemory.*), attention over unequal packed sequences and under
// bitfield masks keeps only its output and log-sum-exp (Attention.*,
// BitfieldAttention.*), and a real-size LLaVA on an H200 lands within 3%
// (docs/results/runtime.md). Measured 0.98-1.08x.
TEST(Runtime, PeakTensorMemoryFollowsThePredictionOnEveryTestModel) {
  const std::string data = std::string(LOOM_TEST_DATA) + "/runtime/";
  const std::vector<std::pair<std::string, TinyRun>> models = {
      {"llm", TinyRun()},
      {"vlm", TinyRun(kVlm, kLaion)},
      {"vlm2", TinyRun(kVlm2, kLaion)},
      {"omni", TinyRun(kOmni, kOmniData)},
      {"clip", TinyRun(data + "tiny-clip.yaml", kLaion)},
      {"vlm-bitfield", TinyRun(data + "tiny-vlm-bitfield.yaml", data + "tiny-obelics.yaml")},
  };
  for (const auto& [name, s] : models) {
    for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
      const std::string plan = MegatronPlanFile(
          s, ScheduleKind::kOneFOneB, 1, fmt::format("mem-{}-{}.json", name, static_cast<int>(r)), 1, 2, 1, nullptr, r);
      const std::vector<double> ratios = PeakTensorRatios(s, plan, name, 2);
      ASSERT_EQ(ratios.size(), 2u) << name;
      for (int p : {0, 1}) {
        const double ratio = ratios[p];
        std::printf("%-13s recompute %d process %d: measured / simulated peak tensor bytes %.3f\n", name.c_str(),
                    static_cast<int>(r), p, ratio);
        EXPECT_GT(ratio, 0.9) << name << " recompute " << static_cast<int>(r) << " process " << p;
        EXPECT_LT(ratio, 1.1) << name << " recompute " << static_cast<int>(r) << " process " << p;
      }
    }
  }
}

// Zero bubble (ZB-H1) splits each backward: B frees a microbatch's kept
// activations but holds what its weight gradients need until W (the
// matmuls' inputs and output gradients, runtime/torch_model.h
// WeightGradDeferral), building up layer by layer as B goes. The simulator
// prices that hold (cost/layer_work.h WeightGradHoldBytes, exact per layer:
// ActivationMemory.BetweenZeroBubblesBAndWALayerHoldsWhatTheMemoryModelPrices):
// each process's peak within 10% of the prediction, on tiny-llm, tiny-vlm and
// tiny-omni at PP 2 under each recomputation policy, and on tiny-llm at TP 2 x PP 2
// with sequence parallelism, whose o and down projections' output gradients
// are whole on every rank. Before the hold was priced (the whole
// activations kept to W), TP 2 x PP 2 with sequence parallelism measured
// 1.16x on its second stage and full recomputation at PP 2 1.14x; measured
// now 1.01-1.06x.
TEST(Runtime, ZeroBubblePeakTensorMemoryFollowsThePrediction) {
  const std::vector<std::pair<std::string, TinyRun>> models = {
      {"llm", TinyRun()}, {"vlm", TinyRun(kVlm, kLaion)}, {"omni", TinyRun(kOmni, kOmniData)}};
  for (const auto& [name, s] : models) {
    for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
      const std::string what = fmt::format("{} zb-h1 pp 2 recompute {}", name, static_cast<int>(r));
      const std::string plan = MegatronPlanFile(
          s, ScheduleKind::kZbH1, 1, fmt::format("mem-zb-{}-{}.json", name, static_cast<int>(r)), 1, 2, 1, nullptr, r);
      ExpectWithinTenPercent(PeakTensorRatios(s, plan, name, 2), 2, what);
    }
  }
  const TinyRun llm;
  const Cluster four = MakeCluster("h100", 1, 4);
  for (Recompute r : {Recompute::kNone, Recompute::kSelective}) {
    nlohmann::json plan = nlohmann::json::parse(std::ifstream(MegatronPlanFile(
        llm, ScheduleKind::kZbH1, 1, fmt::format("mem-zb-tp-{}.json", static_cast<int>(r)), 2, 2, 1, &four, r)));
    plan["units"][0]["sequence_parallel"] = true;
    const std::string file = test::WriteTemp(fmt::format("mem-zb-tp-sp-{}.json", static_cast<int>(r)), plan.dump());
    ExpectWithinTenPercent(PeakTensorRatios(llm, file, "llm", 2, "h100:1x4", 2), 4,
                           fmt::format("llm zb-h1 tp 2 sp pp 2 recompute {}", static_cast<int>(r)));
  }
}

// TP 2 x PP 2 (1F1B, 4 microbatches) on the multimodal test models, no and
// full recomputation: each process's peak within 10% of the prediction.
// tiny-vlm's first stage (ViT, projector, the LLM's embedding) measured
// 1.10x while the memory model divided its patch embedding, norms and
// row-parallel biases by TP (cost/layer_work.h LayerParamsOnTpRank), and
// tiny-omni's 1.19x while each video was its own patch-embedding matmul, two
// 196 KB weight gradients held at once, and 1.10x before a patch embedding's
// backward working set (its weight's fp32 gradient) was priced. Measured
// 0.91-1.03x.
TEST(Runtime, TensorAndPipelineParallelPeakTensorMemoryFollowsThePrediction) {
  const Cluster four = MakeCluster("h100", 1, 4);
  const std::vector<std::pair<std::string, TinyRun>> models = {{"vlm", TinyRun(kVlm, kLaion)},
                                                               {"omni", TinyRun(kOmni, kOmniData)}};
  for (const auto& [name, s] : models) {
    for (Recompute r : {Recompute::kNone, Recompute::kFull}) {
      const std::string what = fmt::format("{} tp 2 pp 2 recompute {}", name, static_cast<int>(r));
      const std::string plan =
          MegatronPlanFile(s, ScheduleKind::kOneFOneB, 1,
                           fmt::format("mem-tp-pp-{}-{}.json", name, static_cast<int>(r)), 2, 2, 1, &four, r);
      ExpectWithinTenPercent(PeakTensorRatios(s, plan, name, 2, "h100:1x4", 2), 4, what);
    }
  }
}

// The same test model in bf16 with `--precision bf16` (tiny-llm's text workload names fp32).
TinyRun InBf16(TinyRun s) {
  const size_t at = s.data_args.find(" --precision fp32");
  if (at != std::string::npos) s.data_args.erase(at, std::string(" --precision fp32").size());
  s.data_args += " --precision bf16";
  s.workload.precision = Precision::kBf16;
  return s;
}

// Context parallelism 2 (the ring over packed sequences) on every test
// model, the batch in one microbatch and in 4: each process's peak within 10%
// of the prediction. The ring once scored each step's whole block of keys
// ([heads, rows, rows], four such matrices in its backward), expanded
// grouped-query K/V and kept its output twice: 1.18x (tiny-llm) to 1.85x
// (tiny-vlm2). Now it scores 64 keys at a time (runtime/context_parallel.cpp
// kRingKeyTile). tiny-omni's patch matrices and conv inputs are made over
// whole sequences on each CP rank, priced so since 2026-11-30 (on a rank's
// share: 1.09x in fp32, 1.10x in bf16). Measured 1.00-1.06x.
TEST(Runtime, ContextParallelPeakTensorMemoryFollowsThePrediction) {
  const Cluster two = MakeCluster("h100", 1, 2);
  const std::vector<std::pair<std::string, TinyRun>> models = {
      {"llm", TinyRun()}, {"vlm", TinyRun(kVlm, kLaion)}, {"omni", TinyRun(kOmni, kOmniData)}};
  for (const auto& [name, s] : models) {
    nlohmann::json plan = nlohmann::json::parse(std::ifstream(MegatronPlanFile(
        s, ScheduleKind::kOneFOneB, 1, fmt::format("mem-cp-{}.json", name), 1, 1, 1, &two, Recompute::kNone, 1, 2)));
    for (int microbatches : {1, kMicrobatches}) {
      plan["units"][0]["pipelines"][0]["microbatches"] = microbatches;
      const std::string file = test::WriteTemp(fmt::format("mem-cp-{}-m{}.json", name, microbatches), plan.dump());
      ExpectWithinTenPercent(PeakTensorRatios(s, file, name, 1, "h100:1x2"), 2,
                             fmt::format("{} cp 2, {} microbatches", name, microbatches));
    }
  }
  // bf16: the ring computes in fp32 and keeps Q, K, V and its output in bf16
  // (it kept fp32 copies: with them tiny-llm and tiny-omni measured 1.19-1.25x
  // at ZeRO-1, 1.12-1.19x without). At ZeRO-1 over the CP ranks the weights are
  // bf16 beside fp32 master slices (zero_shards.h; the whole fp32 parameters
  // kept beside them measured 1.14-1.19x).
  for (const auto& [name, fp32] : {models[0], models[2]}) {
    const TinyRun s = InBf16(fp32);
    nlohmann::json plan = nlohmann::json::parse(
        std::ifstream(MegatronPlanFile(s, ScheduleKind::kOneFOneB, 1, fmt::format("mem-cp-bf16-{}.json", name), 1, 1, 1,
                                       &two, Recompute::kNone, 1, 2)));
    plan["units"][0]["pipelines"][0]["microbatches"] = 1;
    const std::string file = test::WriteTemp(fmt::format("mem-cp-bf16-{}-m1.json", name), plan.dump());
    ExpectWithinTenPercent(PeakTensorRatios(s, file, name, 1, "h100:1x2"), 2, name + " cp 2 bf16 zero-1");
  }
}

// PP 2 x DP 2 (1F1B) at ZeRO 1, 2 and 3 on tiny-llm and on the test models
// whose LLM ties its head to its embedding: each process's peak within 10%
// of its replica's prediction. Before (runtime/gradient_buffers.h):
//  - each bucket was copied out for its all-reduce and the sum copied back,
//    and ZeRO-1 gathered each bucket into a buffer of its own (the bucket's
//    gradient buffer is both now);
//  - the stages holding a tied copy kept whole AdamW state while the memory
//    model sharded it (the tie's sum needs whole gradients: ZeRO-1's shards
//    are views of them), and at ZeRO-2 and 3 ran ZeRO-1 unpriced (the plan
//    now gives such a stage ZeRO-1, plan/compile_plan.cpp);
//  - ZeRO-2's whole gradients, held from the first backward to the
//    reduce-scatter, were not priced (sim/pipeline_costs.h backward_grad_bytes).
//  - a stage's largest backward working set was priced beside all of a
//    microbatch's activations, though the backward frees the layers above
//    before it reaches the one that needs it (tiny-omni's video patch
//    embedding's fp32 weight gradient: ZeRO-2 second stage 0.89-0.90x,
//    ZeRO-3 0.85x; cost/layer_pricing.h BackwardTransientBytes);
//  - ZeRO-3 gathered a stage of towers side by side whole for each backward
//    (tiny-omni's first stage: 1.30-1.38x; runtime/fsdp_layers.h).
// At ZeRO-1 tiny-vlm2 measured 1.11-1.16x and tiny-omni 1.15x; at ZeRO-2
// tiny-llm 1.22x; at ZeRO-3 tiny-vlm2 1.17x. Now 0.96-1.05x.
TEST(Runtime, DataParallelPeakTensorMemoryFollowsThePrediction) {
  const Cluster four = MakeCluster("h100", 1, 4);
  const std::vector<std::pair<std::string, TinyRun>> models = {
      {"llm", TinyRun()}, {"vlm2", TinyRun(kVlm2, kLaion)}, {"omni", TinyRun(kOmni, kOmniData)}};
  for (const auto& [name, s] : models) {
    for (int zero : {1, 2, 3}) {
      const std::string plan =
          MegatronPlanFile(s, ScheduleKind::kOneFOneB, 1, fmt::format("mem-pp-dp-{}-{}.json", name, zero), 1, 2, 2,
                           &four, Recompute::kNone, zero);
      ExpectWithinTenPercent(PeakTensorRatios(s, plan, name, 2, "h100:1x4"), 4,
                             fmt::format("{} pp 2 x dp 2 zero-{}", name, zero));
    }
  }
}

// ZeRO-1 and 2 under mixed precision hold 16-bit weights and fp32 master
// slices only (zero_shards.h HoldFlatWeights), as Megatron's distributed
// optimizer does and cost/memory.h prices: 2 B + 4 B of gradient + 12 B / D
// per parameter. They kept whole fp32 parameters beside the bf16 copies and
// the master slices (4 B more per parameter): tiny-llm at DP 2 ZeRO-1
// measured 1.11x the prediction, ZeRO-1 over CP 2 1.14-1.19x. Each process's
// peak within 10% of its prediction, on one stage (DP 2) and under PP 2 x DP 2,
// and training as ZeRO-0 does: equal losses and weights after three steps
// (AdamW is elementwise; the 16-bit weights are the cast of the same fp32 values).
TEST(Runtime, MixedPrecisionZeroHoldsSixteenBitWeightsAndMasterSlices) {
  const Cluster two = MakeCluster("h100", 1, 2), four = MakeCluster("h100", 1, 4);
  const std::vector<std::pair<std::string, TinyRun>> models = {{"llm", InBf16(TinyRun())},
                                                               {"vlm2", InBf16(TinyRun(kVlm2, kLaion))}};
  for (const auto& [name, s] : models) {
    nlohmann::json reference;  // ZeRO-0's
    for (int zero : {0, 1, 2}) {
      const std::string plan =
          MegatronPlanFile(s, ScheduleKind::kOneFOneB, 1, fmt::format("mem-bf16-dp-{}-{}.json", name, zero), 1, 1, 2,
                           &two, Recompute::kNone, zero);
      if (zero > 0) {
        ExpectWithinTenPercent(PeakTensorRatios(s, plan, name, 1, "h100:1x2"), 2,
                               fmt::format("{} bf16 dp 2 zero-{}", name, zero));
      }
      auto [code, out] = LoomCli("run --model " + s.model_path + " --cluster h100:1x2 " + s.data_args + " --plan " +
                                 plan + " --steps 3 --json");
      ASSERT_EQ(code, 0) << out;
      const auto j = nlohmann::json::parse(out);
      if (zero == 0) {
        reference = j;
        continue;
      }
      ASSERT_EQ(j["losses"].size(), reference["losses"].size());
      for (size_t i = 0; i < j["losses"].size(); ++i) {
        EXPECT_NEAR(j["losses"][i].get<double>(), reference["losses"][i].get<double>(),
                    1e-5 * std::abs(reference["losses"][i].get<double>()))
            << name << " zero-" << zero << " step " << i;
      }
      ASSERT_EQ(j["params"].size(), reference["params"].size());
      for (size_t i = 0; i < j["params"].size(); ++i) {
        for (size_t k = 0; k < j["params"][i].size(); ++k) {
          const double want = reference["params"][i][k].get<double>();
          EXPECT_NEAR(j["params"][i][k].get<double>(), want, 1e-5 * (std::abs(want) + 1))
              << name << " zero-" << zero << " parameter " << i;
        }
      }
    }
    const std::string plan =
        MegatronPlanFile(s, ScheduleKind::kOneFOneB, 1, fmt::format("mem-bf16-pp-dp-{}.json", name), 1, 2, 2, &four,
                         Recompute::kNone, 1);
    ExpectWithinTenPercent(PeakTensorRatios(s, plan, name, 2, "h100:1x4"), 4,
                           fmt::format("{} bf16 pp 2 x dp 2 zero-1", name));
    // Zero-bubble's split backward over held weights (its B pass hands them no
    // gradient: ComputeCopies.AHeldWeightPassesNoGradientOnWhereTheBackwardHandsNone).
    const std::string zb = MegatronPlanFile(s, ScheduleKind::kZbH1, 1, fmt::format("mem-bf16-zb-dp-{}.json", name), 1,
                                            2, 2, &four, Recompute::kNone, 1);
    ExpectWithinTenPercent(PeakTensorRatios(s, zb, name, 2, "h100:1x4"), 4,
                           fmt::format("{} bf16 zb-h1 pp 2 x dp 2 zero-1", name));
  }
}

// TP 2, on tiny-llm, on tiny-llm with a vocabulary of 8191 (its embedding
// and head then hold 87% of its weights, split 4095 + 4096 rows) and on
// tiny-vlm (its ViT and projector split too), with and
// without sequence parallelism (runtime/sequence_parallel.h): each process's
// peak tensor memory within 10% of the prediction (measured 0.99-1.00x),
// and sequence parallelism's below the plan's without it. Held whole on each
// rank, as the runtime held them before, the vocabulary's two matrices would
// add 16 B x 524,224 parameters (weights, gradients, AdamW) = 8.4 MB to the
// 12.7 MiB predicted. Before sequence parallelism ran, the run was compared
// with the plan's sequence-parallel prediction: tiny-llm measured 1.11-1.18x
// it; and before the tensors Gloo's thread let go were waited for, the count
// drifted up by every sum (1.9-2.5x, varying run to run; c10d_calls.h
// AllReduceSumHere). Sequence parallelism beside CP is not run: the run drops
// it, predicts the plan without it and says so.
TEST(Runtime, TensorParallelPeakTensorMemoryFollowsThePrediction) {
  std::ifstream in(kModel);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const char* kind : {"embedding", "lm_head"}) {
    const std::string from = fmt::format("{{kind: {}, vocab: 128,", kind);
    text.replace(text.find(from), from.size(), fmt::format("{{kind: {}, vocab: 8191,", kind));
  }
  const std::vector<std::pair<std::string, TinyRun>> models = {
      {"llm", TinyRun()},
      {"llm-vocab-8191", TinyRun(test::WriteTemp("tiny-llm-8191.yaml", text))},
      {"vlm", TinyRun(kVlm, kLaion)}};
  for (const auto& [name, s] : models) {
    double peak[2] = {0, 0};  // without, with sequence parallelism
    for (bool sp : {false, true}) {
      nlohmann::json plan = nlohmann::json::parse(
          std::ifstream(MegatronPlanFile(s, ScheduleKind::kOneFOneB, 1, fmt::format("mem-tp-{}.json", name), 2, 1, 1)));
      plan["units"][0]["sequence_parallel"] = sp;
      const std::vector<double> ratios =
          PeakTensorRatios(s, test::WriteTemp(fmt::format("mem-tp-{}-{}.json", name, sp), plan.dump()), name, 1);
      ASSERT_EQ(ratios.size(), 2u) << name;
      for (int p : {0, 1}) {
        std::printf("%-15s tp 2%s process %d: measured / simulated peak tensor bytes %.3f\n", name.c_str(),
                    sp ? " sp" : "", p, ratios[p]);
        EXPECT_GT(ratios[p], 0.9) << name << " sp " << sp << " process " << p;
        EXPECT_LT(ratios[p], 1.1) << name << " sp " << sp << " process " << p;
      }
      // One microbatch of the batch's 256 tokens: the activations, not the
      // weights and AdamW state, make the peak.
      plan["units"][0]["pipelines"][0]["microbatches"] = 1;
      auto [code, out] = LoomCli("run --model " + s.model_path + " --cluster h100:1x2 " + s.data_args + " --plan " +
                                 test::WriteTemp("mem-tp-sp.json", plan.dump()) + " --steps 2 --json");
      ASSERT_EQ(code, 0) << out;
      const auto j = nlohmann::json::parse(out);
      peak[sp] = j["peak_tensor_bytes"][0].get<double>();
      EXPECT_TRUE(j["notes"].empty()) << out;
    }
    EXPECT_LT(peak[1], peak[0]) << name << ": the norms' and residuals' rows split";
  }
  auto [code, text_cp] = LoomCli("run --model " + kModel + " --cluster h100:1x4 --tp 2 --cp 2 " + kData + " --steps 1");
  EXPECT_EQ(code, 0) << text_cp;
  EXPECT_NE(text_cp.find("sequence parallelism beside context parallelism is not run yet: unit(s) all run TP"),
            std::string::npos)
      << text_cp;
}

// Under TP the embedding and a tied head hold their vocabulary rows; a head
// whose stage runs another TP than the embedding's would sum its gradient
// with rows of another split: refused before any worker starts, naming both.
TEST(Runtime, ATiedHeadOnAStageOfAnotherTpIsRefused) {
  std::ifstream in(kModel);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string head = "{kind: lm_head, vocab: 128, hidden: 64}";
  text.replace(text.find(head), head.size(), "{kind: lm_head, vocab: 128, hidden: 64, tied: true}");
  const std::string model = test::WriteTemp("tiny-llm-tied-tp.yaml", text);
  const TinyRun s(model);
  nlohmann::json plan = nlohmann::json::parse(
      std::ifstream(MegatronPlanFile(s, ScheduleKind::kOneFOneB, 1, "tied-tp.json", 2, 2, 1)));
  plan["cluster"] = "h100:1x4";
  auto& stages = plan["units"][0]["pipelines"][0]["stages"];
  ASSERT_EQ(stages.size(), 2u);
  stages[0]["tp"] = 2;
  stages[1]["tp"] = 1;
  const std::string file = test::WriteTemp("tied-tp-mixed.json", plan.dump());
  auto [code, out] = LoomCli("run --model " + model + " --cluster h100:1x4 " + s.data_args + " --plan " + file +
                             " --steps 1");
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("module llm ties its LM head (stage llm[3:6], tp 1) to its embedding (stage llm[0:3], tp 2); "
                     "TP splits both by vocabulary rows, so the two stages need one tp"),
            std::string::npos)
      << out;
  // One tp on both stages runs.
  stages[1]["tp"] = 2;
  auto [ok, ran] = LoomCli("run --model " + model + " --cluster h100:1x4 " + s.data_args + " --plan " +
                           test::WriteTemp("tied-tp-same.json", plan.dump()) + " --steps 1");
  EXPECT_EQ(ok, 0) << ran;
}

// ZeRO-3 over two data-parallel replicas, each test model: one layer's full
// weights and gradients at a time beside the slices (runtime/fsdp_layers.h),
// as the simulator prices FSDP, so the peak stays within 10% of the
// prediction (gathering the whole stage for each action held its weights and
// gradients on top: 1.5-1.6x on the demo's FSDP plan; 2.5x on tiny-llm).
// tiny-omni's stage holds four towers side by side, whose backward gathered
// the whole stage too: 1.19x; per layer now, as autograd reaches them from
// the top down. Measured 0.97-1.01x.
TEST(Runtime, Zero3PeakTensorMemoryFollowsThePrediction) {
  const std::string data = std::string(LOOM_TEST_DATA) + "/runtime/";
  const std::vector<std::pair<std::string, TinyRun>> models = {
      {"llm", TinyRun()},
      {"vlm", TinyRun(kVlm, kLaion)},
      {"omni", TinyRun(kOmni, kOmniData)},
      {"vlm-bitfield", TinyRun(data + "tiny-vlm-bitfield.yaml", data + "tiny-obelics.yaml")},
  };
  for (const auto& [name, s] : models) {
    const std::string plan = MegatronPlanFile(s, ScheduleKind::kOneFOneB, 1, fmt::format("mem-zero3-{}.json", name), 1,
                                              1, 2, nullptr, Recompute::kNone, 3);
    const std::vector<double> ratios = PeakTensorRatios(s, plan, name, 1);
    ASSERT_EQ(ratios.size(), 2u) << name;
    for (int p : {0, 1}) {
      const double ratio = ratios[p];
      std::printf("%-13s ZeRO-3 dp 2 process %d: measured / simulated peak tensor bytes %.3f\n", name.c_str(), p,
                  ratio);
      EXPECT_GT(ratio, 0.9) << name << " process " << p;
      EXPECT_LT(ratio, 1.1) << name << " process " << p;
    }
  }
}

// Two "machines" (two `loom run` launchers on this one, joined through the
// store on --master, torchrun-style) train the same as one launcher: node 1
// holds the last pipeline stage and reports the same losses, bit for bit.
TEST(Runtime, TwoNodesRunTheSamePlanAsOne) {
  const TinyRun s;
  const std::string plan = MegatronPlanFile(s, ScheduleKind::kOneFOneB, 1, "run-nodes.json", 1, 2);
  const std::string args =
      "run --model " + kModel + " --cluster h100:1x2 " + kData + " --plan " + plan + " --steps 3 --timeout 20 --json";
  auto [code, one] = LoomCli(args);
  ASSERT_EQ(code, 0) << one;
  const int port = 29000 + static_cast<int>(getpid() % 2000);
  const std::string nodes = fmt::format(" --nnodes 2 --master 127.0.0.1:{} --host 127.0.0.1", port);
  FILE* node0 = popen((std::string(LOOM_BINARY) + " " + args + nodes + " --node-rank 0 2>&1").c_str(), "r");
  auto [code1, out1] = LoomCli(args + nodes + " --node-rank 1");
  std::string out0;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), node0)) out0.append(buf.data(), n);
  const int status0 = pclose(node0);
  ASSERT_EQ(WEXITSTATUS(status0), 0) << out0;
  ASSERT_EQ(code1, 0) << out1;
  const auto j1 = nlohmann::json::parse(out1), j = nlohmann::json::parse(one);
  for (int i = 0; i < kSteps; ++i) EXPECT_EQ(j1["losses"][i].get<double>(), j["losses"][i].get<double>());
  EXPECT_TRUE(nlohmann::json::parse(out0)["losses"][0].is_null());  // node 0 holds no last stage
  // A node rank outside the run is an error naming it.
  auto [code2, out2] = LoomCli(args + " --nnodes 2 --node-rank 2 --master 127.0.0.1:1");
  EXPECT_EQ(code2, 2) << out2;
  EXPECT_NE(out2.find("--node-rank 2"), std::string::npos) << out2;
}

// `loom profile` closes the loop: with the profile it writes of this machine,
// the simulator's prediction of a run (given as Megatron flags, no plan file)
// lands near what the run measures. Only loosely (within 50x): ctest runs
// tests side by side on 2 cores, and a profile taken while another test runs
// (or a run beside one) is off by the contention, seen at 25x. Speed is not
// what this asserts: the H100's shipped profile is ~1000x faster than a CPU
// core, so this fails if the run's profile is not the one used.
TEST(Runtime, ItsOwnProfilePredictsTheRun) {
  const std::string profile = test::WriteTemp("cpu-profile.yaml", "");
  // Measured beside a second copy: the run's two ranks share the machine's cores.
  auto [code, out] =
      LoomCli("profile --model " + kModel + " --tokens 32,64 --repeats 3 --concurrent 2 --out " + profile);
  ASSERT_EQ(code, 0) << out;
  const Profile p = LoadProfile(profile);
  EXPECT_EQ(p.precision, Precision::kFp32);
  EXPECT_NE(p.source.find("2 process(es) side by side"), std::string::npos) << p.source;
  EXPECT_EQ(p.layers.size(), 3u);  // one shape at (1, 32), (2, 32), (1, 64)
  // Gloo over loopback TCP: slower than any GPU link, faster than a floppy disk.
  EXPECT_GT(p.link.bytes_per_s, 1e7);
  EXPECT_LT(p.link.bytes_per_s, 1e12);
  auto [code2, out2] = LoomCli("run --model " + kModel + " --cluster h100:1x2 " + kData +
                               " --pp 2 --microbatches 4 --steps 3 --threads 1 --compare --json --profile " + profile);
  ASSERT_EQ(code2, 0) << out2;
  const auto j = nlohmann::json::parse(out2);
  const double ratio = j["measured_iteration_time_s"].get<double>() / j["simulated_iteration_time_s"].get<double>();
  EXPECT_GT(ratio, 1.0 / 50) << out2;
  EXPECT_LT(ratio, 50.0) << out2;
  auto [code3, out3] = LoomCli("profile --model " + kModel + " --tokens 64,0");
  EXPECT_EQ(code3, 2) << out3;
  EXPECT_NE(out3.find("--tokens: 0"), std::string::npos) << out3;
}

// `loom profile --precision bf16` measures the layers and kernels as a bf16
// run computes them: the profile says bf16, and its matrix-product points move
// half the bytes of the fp32 profile's same points (2-byte elements). A bf16
// run's --compare prices its layers with it; with an fp32 profile it says its
// layers went unpriced and how to profile in bf16.
TEST(Runtime, ABf16ProfilePricesABf16Run) {
  const std::string fp32 = test::WriteTemp("cpu-profile-fp32.yaml", "");
  const std::string bf16 = test::WriteTemp("cpu-profile-bf16.yaml", "");
  for (const auto& [precision, file] : {std::pair{"fp32", fp32}, std::pair{"bf16", bf16}}) {
    auto [code, out] = LoomCli("profile --model " + kModel + " --tokens 32 --repeats 1 --precision " +
                               std::string(precision) + " --out " + file);
    ASSERT_EQ(code, 0) << out;
  }
  const Profile p32 = LoadProfile(fp32), p16 = LoadProfile(bf16);
  EXPECT_EQ(p32.precision, Precision::kFp32);
  EXPECT_EQ(p16.precision, Precision::kBf16);
  EXPECT_NE(p16.source.find(", bf16, "), std::string::npos) << p16.source;
  ASSERT_EQ(p16.ops.size(), p32.ops.size());
  int gemms = 0;
  for (size_t i = 0; i < p16.ops.size(); ++i) {
    ASSERT_EQ(p16.ops[i].op, p32.ops[i].op) << i;
    EXPECT_NEAR(p16.ops[i].flops, p32.ops[i].flops, 1e-6 * p32.ops[i].flops) << i;
    EXPECT_NEAR(p16.ops[i].bytes, p32.ops[i].bytes / 2, 1e-6 * p32.ops[i].bytes) << i;
    gemms += p16.ops[i].op == OpClass::kGemm;
  }
  EXPECT_GT(gemms, 0);
  const std::string run = "run --model " + kModel +
                          " --cluster h100:1x2 --workload text --global-batch 8 --seq-len 32 "
                          "--precision bf16 --pp 2 --microbatches 2 --steps 2 --compare --profile ";
  auto [code16, out16] = LoomCli(run + bf16);
  ASSERT_EQ(code16, 0) << out16;
  EXPECT_EQ(out16.find("measured in"), std::string::npos) << out16;
  auto [code32, out32] = LoomCli(run + fp32);
  ASSERT_EQ(code32, 0) << out32;
  EXPECT_NE(out32.find("measured in fp32, so this bf16 work is priced by its fitted roofline"), std::string::npos)
      << out32;
  EXPECT_NE(out32.find("loom profile --precision bf16"), std::string::npos) << out32;
  auto [bad, bad_out] = LoomCli("profile --model " + kModel + " --precision fp8");
  EXPECT_EQ(bad, 2) << bad_out;
}

}  // namespace
}  // namespace loom
