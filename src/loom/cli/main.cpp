// The `loom` command: parses flags and calls the library. No logic lives here
// that a library user would need (docs/cli.md lists the commands).
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <fstream>
#include <limits>
#include <iostream>
#include <optional>
#include <sstream>
#include <sys/ioctl.h>
#include <thread>
#include <unistd.h>

#include "loom/data/sample_source.h"
#include "loom/error.h"
#include "loom/export/megatron_args.h"
#include "loom/export/pytorch_schedule.h"
#include "loom/plan/plan_json.h"
#include "loom/report/comparison.h"
#include "loom/report/progress_line.h"
#include "loom/report/replay_report.h"
#include "loom/session/failure_replay.h"
#include "loom/report/html_report.h"
#include "loom/report/inspect.h"
#include "loom/strategies/registry.h"
#include "loom/strategies/strategy.h"
#include "loom/report/table.h"
#include "loom/report/timeline_svg.h"
#include "loom/sim/chrome_trace.h"
#include "loom/cost/sm_measurements.h"
#include "loom/cost/cost_model.h"
#include "loom/plan/validate_plan.h"
#include "loom/session/training_session.h"
#include "loom/strategies/baselines/megatron_config.h"
#include "loom/strategies/oobleck/replan.h"
#include "loom/report/simulation_report.h"
#include "loom/runtime/build_info.h"
#include "loom/runtime/green_context.h"
#include "loom/runtime/profiler.h"
#ifdef LOOM_HAVE_RUNTIME
#include "loom/runtime/run.h"
#include "loom/runtime/worker.h"
#endif
#include "loom/spec/cluster.h"
#include "loom/spec/model.h"
#include "loom/spec/workload.h"
#include "loom/spec/yaml_reader.h"

// fuzz/cli_main.cpp defines this to abort, so that an exception other than
// loom::Error reaching main is a crash the fuzzer reports, not an exit 2.
#ifndef LOOM_ON_INTERNAL_ERROR
#define LOOM_ON_INTERNAL_ERROR()
#endif

namespace {

// Flag values CLI11's own checks let through: an empty file name, NaN and
// infinities and zero where a positive number is needed (CLI11's own check
// says "Value 0 not in range 0.000000 to 1.797693e+308"), a negative number
// for an unsigned option (it would wrap).
const CLI::Validator kFileName(
    [](std::string& v) { return v.empty() ? std::string("a file name is required, got an empty one") : std::string(); },
    "FILE");
const CLI::Validator kPositive(
    [](std::string& v) {
      try {
        const double x = std::stod(v);
        return x > 0 && std::isfinite(x) ? std::string() : "must be > 0, got " + v;
      } catch (const std::exception&) {
        return "must be a number > 0, got '" + v + "'";
      }
    },
    "POSITIVE");
const CLI::Validator kNotNegative(
    [](std::string& v) { return !v.empty() && v[0] == '-' ? "must be >= 0, got " + v : std::string(); }, "UINT");


struct WorkloadFlags {
  std::string name;
  std::optional<int64_t> global_batch;
  std::optional<uint64_t> seed;
  std::optional<int64_t> seq_len;
  std::string precision;

  void Add(CLI::App* app) {
    app->add_option("--workload", name, "built-in workload or YAML file");
    app->add_option("--global-batch", global_batch, "samples per iteration")->check(kPositive);
    app->add_option("--seed", seed, "seed of the sample draw")->check(kNotNegative);
    app->add_option("--seq-len", seq_len, "tokens per sample of the `text` workload")
        ->check(kPositive);
    app->add_option("--precision", precision, "bf16 | fp16 | tf32 | fp32 (default: the workload's, bf16)")
        ->check(CLI::IsMember({"bf16", "fp16", "tf32", "fp32"}));
  }
  // The named workload, else (with `model`) the model's default one, with the
  // flags' overrides; nullopt when neither a name nor an override is given.
  std::optional<loom::Workload> Resolve(const loom::Model* model = nullptr) const {
    const bool overrides = global_batch || seed || seq_len || !precision.empty();
    if (name.empty() && (!overrides || model == nullptr)) {
      if (overrides) throw loom::Error("--global-batch, --seed, --seq-len and --precision need --workload here");
      return std::nullopt;
    }
    loom::Workload w = name.empty() ? loom::DefaultWorkload(*model) : loom::LoadWorkload(name);
    if (global_batch && *global_batch > loom::kMaxGlobalBatch) {
      throw loom::Error(fmt::format("--global-batch: at most {} samples per iteration, got {}", loom::kMaxGlobalBatch,
                                    *global_batch));
    }
    if (global_batch) w.global_batch = *global_batch;
    if (seed) w.seed = *seed;
    for (loom::Precision p : {loom::Precision::kBf16, loom::Precision::kFp16, loom::Precision::kTf32,
                              loom::Precision::kFp32}) {
      if (precision == loom::PrecisionName(p)) w.precision = p;
    }
    if (seq_len) {
      if (w.source.kind != "text") {
        throw loom::Error(fmt::format("--seq-len applies to the `text` workload, not '{}'", w.name));
      }
      w.source.seq_len = *seq_len;
    }
    return w;
  }
};

std::string ClusterList() {
  loom::TextTable gpus({"gpu", "peak bf16 TFLOP/s", "HBM GB/s", "memory", "SMs", "NVLink GB/s/dir"});
  for (const auto& g : loom::BuiltinGpus()) {
    gpus.AddRow({g.name, fmt::format("{:.1f}", g.peak_flops / 1e12), fmt::format("{:.0f}", g.hbm_bytes_per_s / 1e9),
                 loom::HumanBytes(static_cast<double>(g.mem_bytes)), fmt::format("{}", g.sm_count),
                 fmt::format("{:.1f}", g.nvlink_bytes_per_s / 1e9)});
  }
  loom::TextTable beds({"cluster", "GPUs", "description"});
  for (const auto& n : loom::TestbedNames()) {
    loom::Cluster c = loom::LoadCluster(n);
    beds.AddRow({n, fmt::format("{}", c.num_gpus()), c.description});
  }
  return gpus.Render() + "\nAny GPU:NODESxPER_NODE (e.g. h800:8x8) gives that GPU's typical server.\n\n" +
         beds.Render();
}

// Names of the simulated ranks of a plan run, replica-major (for traces).
std::vector<std::string> RankNames(const loom::PlanRun& run) {
  std::vector<std::string> names;
  const int p = run.exec.schedule.num_ranks;
  for (int i = 0; i < run.result.num_ranks(); ++i) {
    names.push_back(run.costs.replicas.size() > 1 ? fmt::format("replica {} {}", i / p, run.exec.ranks[i % p].name)
                                                : run.exec.ranks[i % p].name);
  }
  return names;
}

constexpr const char* kProfileHelp =
    "cost model: default (the GPU's shipped measured profile, else the roofline), roofline, or a profile YAML "
    "file (docs/cost-model.md)";

loom::Cluster LoadClusterWithProfile(const std::string& cluster, const std::string& profile) {
  loom::Cluster c = loom::LoadCluster(cluster);
  loom::ApplyCostModel(c, profile);
  return c;
}

void WriteText(const std::string& path, const std::string& text, const char* flag) {
  std::ofstream out(path);
  if (!out) throw loom::Error(fmt::format("{} {}: cannot write the file", flag, path));
  out << text;
  out.close();  // a full disk shows only when the buffer is written out
  if (!out) throw loom::Error(fmt::format("{} {}: writing the file failed (disk full?)", flag, path));
}

#ifdef LOOM_HAVE_RUNTIME
// `loom plan --run`: every strategy's plan run on this machine for `steps`
// steps, each batch with the schedule the strategy gave it; the table of
// measured beside simulated iteration times (means over steps 1.., step 0
// warming up, against the simulation of the same batches) and of speedups
// over megatron. Adds each run to `json` (when it is an object) as "measured".
std::string RunEveryPlan(const loom::Model& model, const loom::Cluster& cluster, const loom::Workload& workload,
                         const loom::Comparison& cmp, int steps, nlohmann::json& json) {
  struct Row {
    std::string name;
    double simulated_s = 0, measured_s = 0, last_loss = 0;
  };
  std::vector<Row> rows;
  std::vector<std::string> not_run;
  const loom::Batch representative = loom::DrawBatch(workload, 0);
  for (size_t i = 0; i < cmp.outcomes.size(); ++i) {
    const auto& o = cmp.outcomes[i];
    if (!o.ok()) continue;
    std::cerr << fmt::format("running {} for {} steps...\n", o.name, steps);
    const auto schedules = loom::ScheduleIterations(o.name, loom::StrategyContext{model, cluster, workload, representative, {}},
                                                    o.result.plan, o.batches, steps);
    loom::RunOptions options;
    options.steps = steps;
    loom::RunResult r;
    try {
      r = loom::RunLocally(model, cluster, workload, o.result.plan, options, schedules);
    } catch (const loom::Error& e) {  // what the runtime cannot run yet: said, and the others still run
      not_run.push_back(fmt::format("{}: {}", o.name, e.what()));
      continue;
    }
    Row row{o.name};
    for (int s = 1; s < steps; ++s) {
      double slowest = 0;
      for (const auto& rank : r.step_s) slowest = std::max(slowest, rank[s]);
      row.measured_s += slowest / (steps - 1);
      row.simulated_s += o.iteration_times_s.at(s) / (steps - 1);
    }
    row.last_loss = r.losses.back();
    rows.push_back(row);
    if (json.is_object()) {
      json["strategies"][i]["measured"] = {{"steps", steps}, {"step_s", r.step_s}, {"losses", r.losses},
                                           {"iteration_time_s", row.measured_s},
                                           {"simulated_iteration_time_s", row.simulated_s}};
    }
  }
  const Row* megatron = nullptr;
  for (const auto& row : rows) {
    if (row.name == "megatron") megatron = &row;
  }
  loom::TextTable t({"strategy", "simulated", "measured", "measured / simulated", "predicted vs megatron",
                     "measured vs megatron", "last loss"});
  for (const auto& row : rows) {
    auto speedup = [&](double mine, double theirs) {
      return megatron == nullptr ? std::string("-") : fmt::format("{:.2f}x", theirs / mine);
    };
    t.AddRow({row.name, fmt::format("{:.4f} s", row.simulated_s), fmt::format("{:.4f} s", row.measured_s),
              fmt::format("{:.2f}x", row.measured_s / row.simulated_s),
              speedup(row.simulated_s, megatron ? megatron->simulated_s : 0),
              speedup(row.measured_s, megatron ? megatron->measured_s : 0), fmt::format("{:.6f}", row.last_loss)});
  }
  std::string out = fmt::format("Run on this machine ({} steps each, means of steps 1..{}; simulated with {}):\n",
                                steps, steps - 1, loom::CostModelOf(cluster).name());
  out += t.Render();
  for (const auto& line : not_run) out += "not run: " + line + "\n";
  if (workload.precision != loom::Precision::kFp32) {
    out += "note: the runtime computes in fp32; plan with --precision fp32 (and this machine's `loom profile`) for "
           "predictions of what it runs\n";
  }
  return out;
}
#endif

// `loom simulate --export-pytorch-csv`: the schedule of the simulated
// batch, or why PyTorch cannot run it (an error: the file asked for is not written).
std::string ExportPytorchCsv(const loom::PlanRun& run, const std::string& path, bool comms) {
  const loom::PytorchExport e = loom::ExportPytorchSchedule(run.exec, comms);
  if (!e.expressible) {
    throw loom::Error(fmt::format("--export-pytorch-csv {}: PyTorch cannot run this plan: {}", path, e.notes));
  }
  WriteText(path, loom::FormatPytorchCsv(e.order), "--export-pytorch-csv");
  return fmt::format("PyTorch schedule ({}) written to {}: {}\n", comms ? "compute_comms" : "compute_only", path,
                     e.notes);
}

// A plan file read for `loom simulate` or `loom run` must be for this model
// (every violation listed first, when its shape differs), cluster and workload.
void CheckPlanIsFor(const loom::Plan& p, const loom::Model& model, const loom::Cluster& cluster,
                    const loom::Workload& workload, const std::string& path) {
  loom::ValidatePlan(p, model, cluster, workload, path);
  if (!p.cluster.empty() && p.cluster != cluster.name) {
    throw loom::Error(fmt::format("{}: the plan was made for cluster '{}', not '{}'; pass --cluster {}", path,
                                  p.cluster, cluster.name, p.cluster));
  }
  if (!p.workload.empty() && p.workload != workload.name) {
    throw loom::Error(fmt::format("{}: the plan was made for workload '{}', not '{}'; pass --workload {}", path,
                                  p.workload, workload.name, p.workload));
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Loom: plan, schedule and simulate multimodal model training on GPU clusters"};
#ifdef LOOM_HAVE_RUNTIME
  const std::string runtime = fmt::format("runtime: {}", loom::runtime::RuntimeBuild());
#else
  const std::string runtime = "no runtime in this build";
#endif
  app.set_version_flag("--version", fmt::format("loom {} ({})", LOOM_VERSION, runtime));
  app.require_subcommand(1);

  app.add_subcommand("models", "list the built-in model zoo");

  CLI::App* run = app.add_subcommand("run", "run a plan for real on this machine (libtorch + c10d Gloo), one process per rank");
  std::string run_model, run_cluster, run_plan, run_strategy;
  WorkloadFlags run_workload;
  int run_steps = 3, run_kill_rank = -1, run_kill_step = -1;
  double run_timeout_s = 60, run_lr = 1e-3;
  bool run_json = false, run_compare = false;
  std::string run_trace, run_profile = "default";
  run->add_option("--model", run_model, "built-in model name or YAML file")->required();
  run->add_option("--cluster", run_cluster, "the cluster the plan was made for")->required();
  run->add_option("--plan", run_plan, "plan JSON file (a plan or a `loom plan --json` output); else the layout the "
                                      "Megatron flags below describe");
  run->add_option("--strategy", run_strategy, "with a `loom plan --json` file: whose plan (default: the best)");
  run_workload.Add(run);
  run->add_option("--steps", run_steps, "training steps")->check(kPositive);
  run->add_option("--timeout", run_timeout_s, "seconds a rank may stay silent before the run fails")
      ->check(kPositive);
  run->add_option("--lr", run_lr, "AdamW learning rate")->check(kPositive);
  run->add_option("--kill-rank", run_kill_rank, "fault injection: this rank exits at the start of --kill-step")
      ->group("");
  run->add_option("--kill-step", run_kill_step, "fault injection step")->group("");
  int run_fault_tolerance = -1;
  std::vector<std::string> run_kills, run_hangs, run_rejoins;
  double run_heartbeat_timeout_s = 3;
  std::string run_checkpoint, run_resume;
  run->add_option("--fault-tolerance", run_fault_tolerance,
                  "survive failed nodes as Oobleck does (an Oobleck plan for this F; without --plan, planned here): "
                  "re-instantiate pipelines from its templates, copy lost layers from surviving replicas, replay the "
                  "interrupted step")
      ->check(CLI::Range(0, 1000))
      ->group("Fault tolerance");
  run->add_option("--kill", run_kills,
                  "PROCESS:STEP:ACTIONS: worker PROCESS kills itself (SIGKILL) in STEP after ACTIONS of its actions; "
                  "repeatable")
      ->group("Fault tolerance");
  run->add_option("--hang", run_hangs, "PROCESS:STEP:ACTIONS: as --kill, but the worker stops (SIGSTOP) and is found "
                                       "by its missing heartbeats; repeatable")
      ->group("Fault tolerance");
  run->add_option("--rejoin", run_rejoins, "NODE:STEP: a failed node comes back before STEP; repeatable")
      ->group("Fault tolerance");
  run->add_option("--heartbeat-timeout", run_heartbeat_timeout_s, "seconds without a heartbeat before a worker is dead")
      ->check(kPositive)
      ->group("Fault tolerance");
  run->add_option("--checkpoint", run_checkpoint,
                  "where a fault-tolerant run that cannot recover writes its state (default: its run directory)")
      ->group("Fault tolerance");
  run->add_option("--resume", run_resume, "start from the checkpoint a fault-tolerant run wrote")
      ->group("Fault tolerance");
  int run_checkpoint_every = 0;
  run->add_option("--checkpoint-every", run_checkpoint_every,
                  "also write a complete checkpoint every K steps (DIR/step-N), for failures that take every "
                  "holder of a layer at once")
      ->check(CLI::NonNegativeNumber)
      ->group("Fault tolerance");
  run->add_flag("--json", run_json, "print JSON");
  int run_nnodes = 0, run_node_rank = -1;
  std::string run_master, run_host;
  run->add_option("--nnodes", run_nnodes, "machines in the run (default: NNODES, else 1)");
  run->add_option("--node-rank", run_node_rank, "this machine's index (default: NODE_RANK, else 0)");
  run->add_option("--master", run_master, "ADDR:PORT of node 0's store (default: MASTER_ADDR:MASTER_PORT)");
  run->add_option("--host", run_host, "this machine's address for Gloo (default: 127.0.0.1 on one node, else its hostname)");
  run->add_option("--trace", run_trace, "write a Chrome trace (Perfetto) of the last step as it ran")->check(kFileName);
  std::string run_timeline;
  run->add_option("--timeline", run_timeline,
                  "write an SVG of the last step as predicted (top) and as it ran (bottom), on one time axis");
  run->add_flag("--compare", run_compare, "print the simulator's prediction of the last step beside what ran");
  run->add_option("--profile", run_profile, "cost model for --compare (default|roofline|FILE)");
  // Without --plan: a Megatron-LM layout, as `loom simulate` takes it.
  loom::ParallelConfig run_cfg;
  std::string run_schedule = "1f1b", run_recompute = "none";
  run->add_option("--tp", run_cfg.tp, "without --plan: tensor parallel degree")->check(kPositive);
  run->add_option("--pp", run_cfg.pp, "without --plan: pipeline parallel degree")->check(kPositive);
  run->add_option("--dp", run_cfg.dp, "without --plan: data parallel degree")->check(kPositive);
  run->add_option("--cp", run_cfg.cp, "without --plan: context parallel degree (ring attention)")
      ->check(kPositive);
  run->add_option("--vpp", run_cfg.vpp, "without --plan: virtual stages per rank (interleaved)")
      ->check(kPositive);
  run->add_option("--microbatches", run_cfg.microbatches, "without --plan: microbatches per replica")
      ->check(kPositive);
  run->add_option("--schedule", run_schedule, "without --plan: gpipe | 1f1b | interleaved | zb-h1");
  run->add_option("--recompute", run_recompute, "without --plan: none | selective | full")
      ->check(CLI::IsMember({"none", "selective", "full"}));
  std::string run_device = "cpu";
  run->add_option("--device", run_device, "cpu (Gloo) | cuda (one GPU per process, NCCL)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  std::string run_sm_quotas = "on";
  run->add_option("--sm-quotas", run_sm_quotas,
                  "cuda: on runs SM-quota stages on green contexts (default); off runs them on one stream, "
                  "one after another (the ablation)")
      ->check(CLI::IsMember({"on", "off"}));
  int run_threads = 1;
  run->add_option("--threads", run_threads, "intra-op threads per rank (default 1)")
      ->check(kPositive);
  app.add_subcommand("clusters", "list the built-in GPUs and testbeds");

  CLI::App* prof = app.add_subcommand("profile", "measure the runtime's layers and kernels on this machine and "
                                                 "write a profile the simulator reads (--profile FILE)");
  std::string prof_model, prof_out;
  std::string prof_tokens = "64,256,1024";
  loom::runtime::ProfilerOptions prof_options;
  prof->add_option("--model", prof_model, "built-in model name or YAML file: its layer shapes are measured")
      ->required();
  prof->add_option("--device", prof_options.device, "cpu | cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  prof->add_option("--gpu", prof_options.gpu, "the datasheet the profile is fitted against: the cluster's GPU");
  prof->add_option("--threads", prof_options.threads, "intra-op threads (the runtime's per rank)")
      ->check(kPositive);
  prof->add_option("--tokens", prof_tokens, "token counts to measure, comma-separated");
  prof->add_option("--repeats", prof_options.repeats, "timed runs per point (median)")->check(kPositive);
  prof->add_option("--concurrent", prof_options.concurrent,
                   "measure beside N-1 copies of the same measurement (the plan's ranks per machine sharing its cores)")
      ->check(kPositive);
  std::string prof_sm_scaling = "on";
  prof->add_option("--sm-scaling", prof_sm_scaling,
                   "cuda: on measures the layers on green contexts of part of the SMs and fits the profile's "
                   "sm_sharing law (default); off leaves it out")
      ->check(CLI::IsMember({"on", "off"}));
  prof->add_option("--out", prof_out, "write the profile here (default: standard output)")->check(kFileName);

  CLI::App* probe_sm = app.add_subcommand("probe-sm", "measure green contexts on this GPU (CUDA builds): creation "
                                                      "per SM quota, launches on pre-created streams, co-located stacks");
  int probe_repeats = 30;
  probe_sm->add_option("--repeats", probe_repeats, "runs per measurement (median)")->check(kPositive);
  CLI::App* fit_sm = app.add_subcommand("fit-sm", "fit the SM-sharing model (Mosaic §3.3: SM scaling, launch floor, "
                                                  "interference Eq. 8) to measured green-context runs");
  std::string fit_sm_dir, fit_sm_gpu = "h100";
  fit_sm->add_option("measurements", fit_sm_dir, "folder with sm_surface_small.json, sm_scaling_large.json, "
                                                 "colocation_small.json, colocation_large.json")
      ->required();
  fit_sm->add_option("--gpu", fit_sm_gpu, "the GPU they were measured on (its SMs and HBM bandwidth)");

  CLI::App* inspect = app.add_subcommand("inspect", "per-module parameters, FLOPs and intensity");
  std::string model_name;
  std::string cluster_name;
  bool json = false;
  WorkloadFlags workload;
  inspect->add_option("model", model_name, "built-in model name or YAML file")->required();
  inspect->add_option("--cluster", cluster_name, "adds forward time per sample on its GPU");
  inspect->add_flag("--json", json, "print JSON");
  workload.Add(inspect);

  CLI::App* simulate = app.add_subcommand("simulate", "simulate one iteration of the Megatron-LM layout");
  std::string sim_model, sim_cluster, trace_path, recompute = "none";
  bool sim_json = false;
  WorkloadFlags sim_workload;
  loom::ParallelConfig cfg;
  simulate->add_option("--model", sim_model, "built-in model name or YAML file")->required();
  simulate->add_option("--cluster", sim_cluster, "GPU:NODESxPER_NODE, testbed or YAML file")->required();
  std::string sim_profile = "default", plan_profile = "default";
  simulate->add_option("--profile", sim_profile, kProfileHelp);
  sim_workload.Add(simulate);
  simulate->add_option("--tp", cfg.tp, "tensor parallel degree");
  simulate->add_option("--pp", cfg.pp, "pipeline parallel degree");
  simulate->add_option("--dp", cfg.dp, "data parallel degree");
  simulate->add_option("--cp", cfg.cp, "context parallel degree");
  simulate->add_option("--vpp", cfg.vpp, "virtual pipeline chunks per rank (interleaved)");
  simulate->add_option("--microbatches", cfg.microbatches, "microbatches per replica per iteration");
  std::string sim_schedule = "1f1b";
  simulate->add_option("--schedule", sim_schedule, "gpipe | 1f1b | interleaved | zb-h1");
  simulate->add_option("--recompute", recompute, "none | selective | full")
      ->check(CLI::IsMember({"none", "selective", "full"}));
  simulate->add_option("--trace", trace_path, "write a Chrome trace (Perfetto) of the iteration")->check(kFileName);
  simulate->add_flag("--json", sim_json, "print JSON");
  std::string sim_export_csv, sim_import_csv;
  bool sim_csv_comms = false;
  simulate->add_option("--export-pytorch-csv", sim_export_csv,
                       "write the simulated schedule as PyTorch pipelining's CSV (torchtitan's "
                       "pipeline_parallel_schedule_csv), or say why PyTorch cannot run it")
      ->check(kFileName);
  simulate->add_flag("--pytorch-csv-comms", sim_csv_comms,
                     "with --export-pytorch-csv: the compute_comms form (SEND_F / RECV_F / SEND_B / RECV_B cells)");
  simulate->add_option("--import-pytorch-csv", sim_import_csv,
                       "simulate a PyTorch pipelining CSV's order: PP, stages per rank and microbatches from the file, "
                       "TP / DP / CP / --recompute from the flags")
      ->check(kFileName);

  CLI::App* replay = app.add_subcommand("replay", "replay training over node failures: oobleck against varuna "
                                                  "(checkpoint and restart) and bamboo (redundant computation)");
  std::string rp_model, rp_cluster, rp_profile = "default", rp_trace, rp_systems = "oobleck,varuna,bamboo", rp_svg;
  std::string rp_json;
  double rp_mtbf_s = 3600, rp_hours = 12;
  uint64_t rp_seed = 0;
  int rp_min_nodes = -1;
  WorkloadFlags rp_workload;
  loom::ReplayOptions rp_options;
  replay->add_option("--model", rp_model, "built-in model name or YAML file")->required();
  replay->add_option("--cluster", rp_cluster, "GPU:NODESxPER_NODE, testbed or YAML file")->required();
  replay->add_option("--profile", rp_profile, kProfileHelp);
  rp_workload.Add(replay);
  replay->add_option("--systems", rp_systems, "oobleck,varuna,bamboo (default all three)");
  replay->add_option("--mtbf", rp_mtbf_s, "seconds between failures of the cluster, mean (default 3600)")
      ->check(kPositive);
  replay->add_option("--hours", rp_hours, "wall-clock hours replayed (default 12)")->check(kPositive);
  replay->add_option("--trace-seed", rp_seed, "seed of the generated failure trace (default 0)");
  replay->add_option("--min-nodes", rp_min_nodes, "failures stop at this many nodes (default: half)");
  replay->add_option("--failures", rp_trace, "read the trace from a file of \"TIME_S fail|join NODE\" lines instead");
  replay->add_option("--fault-tolerance", rp_options.fault_tolerance, "oobleck's f (default 1)")
      ->check(CLI::Range(0, 1000));
  replay->add_option("--checkpoint-every", rp_options.checkpoint_every, "varuna's iterations per checkpoint (default 10)")
      ->check(kPositive);
  bool rp_free_checkpoints = false;
  replay->add_flag("--free-checkpoints", rp_free_checkpoints,
                   "varuna's checkpoints cost nothing to write or load (thesis Table 2.4's ablation)");
  replay->add_option("--svg", rp_svg, "write samples/s over time of every system as an SVG plot");
  replay->add_option("--json", rp_json, "write the replay as JSON")->check(kFileName);
  std::string rp_report;
  replay->add_option("--report", rp_report, "write an HTML report: the plot, the table, every system's events")->check(kFileName);

  CLI::App* plan = app.add_subcommand("plan", "plan with each strategy, simulate, compare (the main job)");
  std::string plan_model, plan_cluster, strategies = "all", plan_json, plan_report, plan_trace, plan_export;
  int iterations = 10;
  WorkloadFlags plan_workload;
  plan->add_option("--model", plan_model, "built-in model name or YAML file")->required();
  plan->add_option("--cluster", plan_cluster, "GPU:NODESxPER_NODE, testbed or YAML file")->required();
  plan->add_option("--profile", plan_profile, kProfileHelp);
  plan_workload.Add(plan);
  plan->add_option("--strategy", strategies, "NAME[,NAME...] or all (default all)");
  plan->add_option("--iterations", iterations, "sampled batches to simulate per strategy (default 10)");
  loom::CompareOptions compare;
  plan->add_option("--tp", compare.fixed_tp, "pin tensor parallelism of pipeline strategies (paper configs)")
      ->check(kPositive);
  plan->add_option("--pp", compare.fixed_pp, "pin pipeline parallelism of pipeline strategies (paper configs)")
      ->check(kPositive);
  plan->add_option("--dp", compare.fixed_dp,
                   "pin data parallelism of pipeline strategies and entrain (Entrain's DP 4; paper configs)")
      ->check(kPositive);
  plan->add_option("--schedule-budget", compare.schedule_budget_s,
                   "seconds per batch for per-batch schedule searches (pipeweaver; default 1)")
      ->check(kPositive);
  plan->add_option("--fault-tolerance", compare.fault_tolerance,
                   "oobleck: pipelines that may fail at once without a restart, f (default 0; f + 1 pipelines)")
      ->check(CLI::Range(0, 1000));
  plan->add_option("--time-budget", compare.time_budget_s,
                   "seconds each strategy's search may take; when spent it returns the best plan found so far "
                   "(default: no limit)")
      ->check(kPositive);
  compare.jobs = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  plan->add_option("--jobs", compare.jobs,
                   "strategies planned at once, each on its own thread (default: this machine's cores; the same "
                   "plans and numbers for any value)")
      ->check(kPositive);
  bool exhaustive = false;
  plan->add_flag("--exhaustive", exhaustive,
                 "simulate every candidate, even those whose lower bound cannot beat the best plan found "
                 "(slower; the same best plans; docs/search.md)");
  plan->add_option("--json", plan_json, "write the comparison and every plan as JSON")->check(kFileName);
  plan->add_option("--report", plan_report, "write a self-contained HTML report")->check(kFileName);
  plan->add_option("--trace", plan_trace, "write a Chrome trace (Perfetto) of the best plan's first iteration")->check(kFileName);
  plan->add_option("--export", plan_export, "print launch arguments for a framework: megatron")
      ->check(CLI::IsMember({"megatron"}));
  bool plan_run = false;
  int plan_run_steps = 4;
  plan->add_flag("--run", plan_run,
                 "then run every strategy's plan on this machine (as `loom run`) and print measured beside simulated "
                 "iteration times and speedups over megatron");
  plan->add_option("--run-steps", plan_run_steps, "with --run: steps per plan (default 4; the first is warm-up)")
      ->check(CLI::Range(2, 1000));
  std::string sim_plan, sim_strategy;
  simulate->add_option("--plan", sim_plan,
                       "simulate a plan JSON file instead of flags; a `loom plan --json` output replays every batch "
                       "it was measured on, with its per-batch schedules");
  simulate->add_option("--strategy", sim_strategy, "with --plan: the strategy whose plan to take (default: the best)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }

  try {
    if (app.got_subcommand("models")) {
      std::cout << loom::FormatModelList();
    } else if (app.got_subcommand("clusters")) {
      std::cout << ClusterList();
    } else if (app.got_subcommand("probe-sm")) {
#ifdef LOOM_HAVE_RUNTIME
      std::cout << loom::runtime::ProbeSmPartitions(0, probe_repeats);
#else
      throw loom::Error("`loom probe-sm` needs the runtime (libtorch) built with CUDA");
#endif
    } else if (app.got_subcommand("fit-sm")) {
      std::cout << loom::FitSmSharing(fit_sm_dir, loom::FindGpu(fit_sm_gpu)).text;
    } else if (app.got_subcommand("inspect")) {
      loom::InspectOptions options;
      options.workload = workload.Resolve();
      if (!cluster_name.empty()) {
        options.cluster = loom::LoadCluster(cluster_name);
      }
      nlohmann::json result = loom::InspectModel(loom::LoadModel(model_name), options);
      std::cout << (json ? result.dump(2) + "\n" : loom::FormatInspect(result));
    }
    if (app.got_subcommand("replay")) {
      const loom::Model model = loom::LoadModel(rp_model);
      const loom::Cluster cluster = LoadClusterWithProfile(rp_cluster, rp_profile);
      std::optional<loom::Workload> w = rp_workload.Resolve(&model);
      const loom::Workload workload = w ? *w : loom::DefaultWorkload(model);
      const double duration_s = rp_hours * 3600;
      const loom::FailureTrace trace =
          rp_trace.empty()
              ? loom::GenerateFailureTrace(cluster.nodes, rp_mtbf_s, duration_s, rp_seed,
                                           rp_min_nodes >= 0 ? rp_min_nodes : (cluster.nodes + 1) / 2)
              : loom::ReadFailureTrace(rp_trace, cluster.nodes, duration_s);
      std::vector<std::string> systems;
      for (std::string rest = rp_systems; !rest.empty();) {
        const auto comma = rest.find(',');
        systems.push_back(rest.substr(0, comma));
        rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
      }
      if (rp_free_checkpoints) rp_options.storage_bytes_per_s = std::numeric_limits<double>::infinity();
      const auto replays = loom::ReplayFailures(model, cluster, workload, trace, systems, rp_options);
      std::cout << loom::FormatReplay(model.name, cluster.name, trace, replays);
      if (!rp_svg.empty()) {
        WriteText(rp_svg, loom::ReplaySvg(trace, replays), "--svg");
        std::cout << "Plot written to " << rp_svg << "\n";
      }
      if (!rp_report.empty()) {
        WriteText(rp_report, loom::ReplayHtml(model.name, cluster.name, trace, replays), "--report");
        std::cout << "Report written to " << rp_report << "\n";
      }
      if (!rp_json.empty()) {
        WriteText(rp_json, loom::ReplayJson(trace, replays).dump(2) + "\n", "--json");
        std::cout << "Replay written to " << rp_json << "\n";
      }
    }
    if (app.got_subcommand("plan")) {
      loom::Model model = loom::LoadModel(plan_model);
      loom::Cluster cluster = LoadClusterWithProfile(plan_cluster, plan_profile);
      std::optional<loom::Workload> w = plan_workload.Resolve(&model);
      loom::Workload workload = w ? *w : loom::DefaultWorkload(model);
      std::vector<std::string> names;
      if (strategies == "all") {
        names = loom::StrategyNames();
      } else {
        std::string rest = strategies;
        if (rest.empty()) {
          throw loom::Error(fmt::format("--strategy: empty; valid: NAME[,NAME...] of {}, or all",
                                        fmt::join(loom::StrategyNames(true), ", ")));
        }
        while (true) {
          auto comma = rest.find(',');
          std::string name = rest.substr(0, comma);
          if (loom::StrategyDescription(name).empty()) {
            throw loom::Error(fmt::format("--strategy: unknown strategy '{}'; valid: {}, or all", name,
                                          fmt::join(loom::StrategyNames(true), ", ")));
          }
          if (std::find(names.begin(), names.end(), name) != names.end()) {
            throw loom::Error(fmt::format("--strategy: {} is named twice; name each strategy once", name));
          }
          names.push_back(name);
          if (comma == std::string::npos) break;
          rest = rest.substr(comma + 1);
        }
      }
      compare.prune = !exhaustive;
      // Only the outputs that list every batch keep them: otherwise memory
      // does not grow with --iterations.
      compare.keep_batches = !plan_json.empty() || !plan_report.empty() || plan_run;
      std::function<void(const loom::Progress&)> progress;
      std::vector<std::string> progress_lines;  // one per job slot; calls are serialized
      if (isatty(STDERR_FILENO)) {
        progress = [&progress_lines](const loom::Progress& p) {
          if (p.slot >= static_cast<int>(progress_lines.size())) progress_lines.resize(p.slot + 1);
          progress_lines[p.slot] = p.what.empty() ? "" : loom::FormatProgress(p);
          std::string line;
          for (const auto& l : progress_lines) {
            if (l.empty()) continue;
            if (!line.empty()) line += " | ";
            line += l;
          }
          // One terminal row, so "\r\033[K" erases all of it next time.
          winsize ws{};
          if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1 && line.size() >= ws.ws_col) {
            line.resize(ws.ws_col - 1);
          }
          std::cerr << "\r\033[K" << line << std::flush;
        };
      }
      // --run compares each run step with the simulation of the same batch.
      if (plan_run) iterations = std::max(iterations, plan_run_steps);
      loom::Comparison cmp = loom::CompareStrategies(model, cluster, workload, names, iterations, progress, compare);
      if (progress) std::cerr << "\r\033[K";
      std::cout << loom::FormatComparison(cmp);
      // SM quotas priced by the shipped law describe Python eager launches; Loom's
      // runtime is priced by its own (docs/results/mosaic.md, section 2).
      if (cmp.best >= 0 && plan_profile == "default" && cluster.cost_model &&
          cluster.cost_model->sm_sharing().launch_floor_s_per_layer > 0) {
        bool quotas = false;
        for (const auto& u : cmp.outcomes[cmp.best].result.plan.units) quotas = quotas || u.sm_fraction < 1;
        if (quotas) {
          std::cout << "note: the best plan's SM quotas are priced by the SM-sharing law of "
                    << cluster.cost_model->name()
                    << ", fitted to Python eager runs; for Loom's runtime, plan with its own profile "
                       "(loom profile --device cuda; docs/results/mosaic.md)\n";
        }
      }
      nlohmann::json plans_json = plan_json.empty() ? nlohmann::json() : loom::ComparisonJson(cmp);
      if (plan_run) {
#ifdef LOOM_HAVE_RUNTIME
        std::cout << "\n" << RunEveryPlan(model, cluster, workload, cmp, plan_run_steps, plans_json);
#else
        throw loom::Error("loom plan --run: this build has no runtime (a fuzz build); "
                          "build with `make`, which finds the PyTorch scripts/install-deps.sh installs)");
#endif
      }
      if (!plan_json.empty()) {
        WriteText(plan_json, plans_json.dump(2) + "\n", "--json");
        std::cout << "Plans written to " << plan_json << "\n";
      }
      if (!plan_report.empty()) {
        loom::WriteHtmlReport(plan_report, cmp);
        std::cout << "Report written to " << plan_report << "\n";
      }
      if (!plan_trace.empty() && cmp.best >= 0) {
        const auto& run = cmp.outcomes[cmp.best].first_run;
        loom::WriteChromeTrace(plan_trace, loom::ChromeTrace(run.result, run.exec.schedule, RankNames(run)));
        std::cout << "Trace of " << cmp.outcomes[cmp.best].name << " written to " << plan_trace << "\n";
      }
      if (plan_export == "megatron") {
        std::cout << "\n";
        for (const auto& o : cmp.outcomes) {
          if (o.ok()) std::cout << loom::FormatMegatronExport(o.name, loom::ExportMegatron(o.result.plan, model)) << "\n";
        }
      }
      bool any = false;
      for (const auto& o : cmp.outcomes) any = any || o.ok();
      if (!any) throw loom::Error("no strategy found a plan that fits; see the reasons above");
    }
    if (app.got_subcommand("profile")) {
      const loom::Model model = loom::LoadModel(prof_model);
      prof_options.sm_scaling = prof_sm_scaling == "on";
      prof_options.tokens.clear();
      std::stringstream list(prof_tokens);
      for (std::string item; std::getline(list, item, ',');) {
        try {
          size_t used = 0;
          prof_options.tokens.push_back(std::stoll(item, &used));
          if (used != item.size()) throw std::invalid_argument(item);
        } catch (const std::exception&) {
          throw loom::Error(fmt::format("--tokens: '{}' is not an integer; valid: e.g. 64,256,1024", item));
        }
      }
#ifdef LOOM_HAVE_RUNTIME
      const loom::Profile profile = loom::runtime::MeasureProfile(model, prof_options);
      const std::string yaml = loom::ProfileToYaml(profile);
      if (prof_out.empty()) {
        std::cout << yaml;
      } else {
        std::ofstream out(prof_out);
        out << "# Written by `loom profile --model " << prof_model << " --device " << prof_options.device
            << " --threads " << prof_options.threads << " --tokens " << prof_tokens << "`\n" << yaml;
        out.close();
        if (!out) throw loom::Error(fmt::format("--out {}: cannot write", prof_out));
        std::cerr << fmt::format("wrote {}: {} layer points, {} kernel points\n", prof_out, profile.layers.size(),
                                 profile.ops.size());
      }
#else
      throw loom::Error("loom profile: this build has no runtime (a fuzz build); `make` builds one with "
                        "the PyTorch that scripts/install-deps.sh installs");
#endif
    }
    if (app.got_subcommand("run")) {
      loom::Model model = loom::LoadModel(run_model);
      loom::Cluster cluster = loom::LoadCluster(run_cluster);
      std::optional<loom::Workload> w = run_workload.Resolve(&model);
      loom::Workload workload = w ? *w : loom::DefaultWorkload(model);
      loom::Plan p;
      std::vector<loom::RecordedBatch> recorded;
      if (!run_plan.empty()) {
        loom::PlanFile file = loom::LoadPlanFile(run_plan, run_strategy);
        p = std::move(file.plan);
        recorded = std::move(file.batches);
        CheckPlanIsFor(p, model, cluster, workload, run_plan);
      } else if (run_fault_tolerance >= 0) {  // Oobleck's plan for F
        const loom::Batch first = loom::DrawBatch(workload, 0);
        loom::StrategyContext ctx{model, cluster, workload, first, {}};
        ctx.fault_tolerance = run_fault_tolerance;
        p = loom::RunStrategy("oobleck", ctx).plan;
        run_plan = fmt::format("oobleck f={}", run_fault_tolerance);
      } else {
        run_cfg.schedule = loom::ParseScheduleKind(run_schedule, "--schedule");
        run_cfg.recompute = loom::ParseRecompute(run_recompute, "--recompute");
        run_cfg.Validate(model, cluster, workload);
        const loom::Batch first = loom::DrawBatch(workload, 0);
        p = loom::MegatronConfigPlan(loom::StrategyContext{model, cluster, workload, first, {}}, run_cfg);
        run_plan = fmt::format("tp {} pp {} dp {} cp {} vpp {} {}", run_cfg.tp, run_cfg.pp, run_cfg.dp, run_cfg.cp,
                               run_cfg.vpp, run_schedule);
      }
#ifdef LOOM_HAVE_RUNTIME
      loom::RunOptions o;
      o.steps = run_steps;
      o.timeout_s = run_timeout_s;
      o.learning_rate = run_lr;
      o.kill_rank = run_kill_rank;
      o.kill_step = run_kill_step;
      o.threads_per_rank = run_threads;
      o.device = run_device;
      o.sm_quotas = run_sm_quotas == "on";
      // Fault tolerance: Oobleck's templates re-plan after failures.
      auto parse_triple = [](const std::string& text, const char* flag, int parts) {
        std::vector<int> v;
        std::istringstream in(text);
        std::string field;
        while (std::getline(in, field, ':')) {
          try {
            size_t used = 0;
            v.push_back(std::stoi(field, &used));
            if (used != field.size()) throw std::invalid_argument(field);
          } catch (const std::exception&) {
            v.clear();
            break;
          }
        }
        if (static_cast<int>(v.size()) != parts) {
          throw loom::Error(fmt::format("{} {}: valid: {}", flag, text,
                                        parts == 3 ? "PROCESS:STEP:ACTIONS, e.g. 1:2:5" : "NODE:STEP, e.g. 2:3"));
        }
        return v;
      };
      if ((!run_kills.empty() || !run_hangs.empty() || !run_rejoins.empty()) && run_fault_tolerance < 0) {
        throw loom::Error("--kill, --hang and --rejoin act on a fault-tolerant run: add --fault-tolerance F");
      }
      for (const auto& k : run_kills) {
        const auto v = parse_triple(k, "--kill", 3);
        o.kills.push_back({v[0], v[1], v[2], false});
      }
      for (const auto& k : run_hangs) {
        const auto v = parse_triple(k, "--hang", 3);
        o.kills.push_back({v[0], v[1], v[2], true});
      }
      for (const auto& j : run_rejoins) {
        const auto v = parse_triple(j, "--rejoin", 2);
        o.rejoins.push_back({v[0], v[1]});
      }
      o.fault_tolerant = run_fault_tolerance >= 0 || !run_resume.empty();
      o.heartbeat_timeout_s = run_heartbeat_timeout_s;
      o.checkpoint_dir = run_checkpoint;
      o.checkpoint_every = run_checkpoint_every;
      if (run_checkpoint_every > 0 && run_fault_tolerance < 0) {
        throw loom::Error("--checkpoint-every acts on a fault-tolerant run: add --fault-tolerance F");
      }
      o.resume_from = run_resume;
      std::optional<loom::OobleckReplanner> oobleck;
      loom::Replanner replanner;
      if (run_fault_tolerance >= 0) {
        oobleck.emplace(model, cluster, workload, p, run_fault_tolerance);
        replanner = [&oobleck](const std::vector<int>& failed, const std::vector<int>& joined) {
          return (*oobleck)(failed, joined);
        };
      }
      // Several machines, torchrun-style: flags, else the environment.
      auto env = [](const char* name) { const char* v = std::getenv(name); return std::string(v ? v : ""); };
      auto parse_int = [](const std::string& text, const char* what) {
        try {
          size_t used = 0;
          const int v = std::stoi(text, &used);
          if (used != text.size()) throw std::invalid_argument(text);
          return v;
        } catch (const std::exception&) {
          throw loom::Error(fmt::format("{}: '{}' is not an integer", what, text));
        }
      };
      o.nnodes = run_nnodes > 0 ? run_nnodes : (env("NNODES").empty() ? 1 : parse_int(env("NNODES"), "NNODES"));
      o.node_rank = run_node_rank >= 0 ? run_node_rank
                                       : (env("NODE_RANK").empty() ? 0 : parse_int(env("NODE_RANK"), "NODE_RANK"));
      std::string master = run_master;
      if (master.empty() && !env("MASTER_ADDR").empty()) master = env("MASTER_ADDR") + ":" + env("MASTER_PORT");
      if (!master.empty()) {
        const auto colon = master.rfind(':');
        if (colon == std::string::npos || colon == 0 || colon + 1 == master.size()) {
          throw loom::Error(fmt::format("--master: '{}'; valid: ADDR:PORT, e.g. 10.0.0.1:29500", master));
        }
        o.master_addr = master.substr(0, colon);
        o.port = parse_int(master.substr(colon + 1), "--master port");
      }
      if (!run_host.empty()) {
        o.host = run_host;
      } else if (o.nnodes > 1) {
        char name[256] = {0};
        gethostname(name, sizeof(name) - 1);
        o.host = name;
      }
      // Strategies that schedule every batch (PipeWeaver, MMScale) run each
      // step's batch as they scheduled it: the schedule `loom plan` recorded for
      // that iteration, else the strategy's own for it (computed here, once, so
      // every process runs the same one even where the search has a time budget).
      const loom::Batch representative = loom::DrawBatch(workload, 0);
      const auto schedules = loom::ScheduleIterations(
          p.strategy, loom::StrategyContext{model, cluster, workload, representative, {}}, p, recorded, run_steps);
      loom::RunResult r = loom::RunLocally(model, cluster, workload, p, o, schedules, replanner);
      if (!r.events.empty()) {  // what ran last: the last generation's plan on its nodes
        p = r.final_plan;
        cluster.nodes = r.final_nodes;
      }
      const int last = run_steps - 1;
      const loom::Batch last_batch = loom::DrawBatch(workload, last);
      loom::PlanRun simulated;
      if (!run_trace.empty() || run_compare || !run_timeline.empty()) {
        loom::ApplyCostModel(cluster, run_profile);
        // The runtime computes in fp32 (on the CPU): so does the prediction.
        loom::Workload as_run = workload;
        as_run.precision = loom::Precision::kFp32;
        // The last step's plan, as compiled (with its batch's schedule).
        simulated = loom::RunPlan(model, cluster, as_run, p, last_batch, schedules[last] ? &*schedules[last] : nullptr);
      }
      if (!run_trace.empty()) {
        const int P = simulated.exec.schedule.num_ranks;
        std::vector<std::string> names;
        for (int i = 0; i < r.measured.num_ranks(); ++i) {
          names.push_back(fmt::format("replica {} {} (measured)", i / P, simulated.exec.ranks[i % P].name));
        }
        loom::WriteChromeTrace(run_trace, loom::ChromeTrace(r.measured, simulated.exec.schedule, names));
      }
      if (!run_timeline.empty()) {
        const int P = simulated.exec.schedule.num_ranks;
        std::vector<std::string> sim_names, run_names;
        for (int i = 0; i < simulated.result.num_ranks(); ++i) sim_names.push_back(simulated.exec.ranks[i % P].name);
        for (int i = 0; i < r.measured.num_ranks(); ++i) {
          run_names.push_back(fmt::format("replica {} {}", i / P, simulated.exec.ranks[i % P].name));
        }
        const std::string svg = loom::StackedTimelinesSvg(
            {{fmt::format("simulated: {:.4f} s ({})", simulated.metrics.iteration_time_s,
                          loom::CostModelOf(cluster).name()),
              &simulated.result, &simulated.exec.schedule, sim_names},
             {fmt::format("measured by loom run: {:.4f} s (last of {} steps)", r.measured.iteration_time_s,
                          run_steps),
              &r.measured, &simulated.exec.schedule, run_names}});
        std::ofstream out(run_timeline);
        out << svg;
        out.close();
        if (!out) throw loom::Error(fmt::format("--timeline {}: cannot write", run_timeline));
      }
      if (run_json) {
        nlohmann::json j = {{"losses", r.losses}, {"step_s", r.step_s}, {"params", r.params},
                            {"measured_busy_s", r.measured.busy_s},
                            {"measured_iteration_time_s", r.measured.iteration_time_s},
                            {"peak_rss_bytes", r.peak_rss_bytes}, {"peak_tensor_bytes", r.peak_tensor_bytes},
                            {"first_step", r.first_step}};
        nlohmann::json events = nlohmann::json::array();
        for (const auto& e : r.events) {
          events.push_back({{"step", e.step}, {"kind", e.kind}, {"nodes", e.nodes}, {"outcome", e.outcome},
                            {"detect_s", e.detect_s}, {"recover_s", e.recover_s}, {"lost_s", e.lost_s},
                            {"copied_bytes", e.copied_bytes}, {"processes", e.processes}});
        }
        if (o.fault_tolerant) j["events"] = events;
        if (run_compare) {
          j["simulated_iteration_time_s"] = simulated.metrics.iteration_time_s;
          j["simulated_busy_s"] = simulated.result.busy_s;
          j["simulated_group_peak_mem_bytes"] = simulated.group_peak_mem_bytes;
        }
        std::cout << j.dump(2) << "\n";
      } else {
        double peak = 0, tensors = 0;
        for (double b : r.peak_rss_bytes) peak = std::max(peak, b);
        for (double b : r.peak_tensor_bytes) tensors = std::max(tensors, b);
        std::cout << fmt::format("ran {} ({}) on {} process(es), {} step(s); peak resident memory {} per process, "
                                 "peak tensor memory of the steps {}\n",
                                 run_plan, p.strategy, r.step_s.size(), r.losses.size(), loom::HumanBytes(peak),
                                 loom::HumanBytes(tensors));
        for (const auto& n : r.notes) std::cout << "  " << n << "\n";
        for (const auto& u : p.units) {
          if (u.sm_fraction < 1 && run_device != "cuda") {
            std::cout << "  SM quotas: on this CPU build the modules sharing a GPU ran one after another; the "
                         "quotas shape the prediction only\n";
            break;
          }
        }
        for (const auto& e : r.events) {
          if (e.kind == "failure") {
            std::cout << fmt::format(
                "  step {} (replayed): node(s) {} failed: {}\n    noticed in {:.3f} s, next generation ({} "
                "processes) ready in {:.3f} s, {} of layer state copied; {:.3f} s of work lost\n",
                e.step, fmt::join(e.nodes, ", "), e.outcome, e.detect_s, e.processes, e.recover_s,
                loom::HumanBytes(static_cast<double>(e.copied_bytes)), e.lost_s);
          } else {
            std::cout << fmt::format("  before step {}: {}\n    next generation ({} processes) ready in {:.3f} s, {} "
                                     "of layer state copied\n",
                                     e.step, e.outcome, e.processes, e.recover_s,
                                     loom::HumanBytes(static_cast<double>(e.copied_bytes)));
          }
        }
        if (r.first_step > 0) std::cout << fmt::format("  resumed after step {} from {}\n", r.first_step - 1, run_resume);
        for (size_t i = r.first_step; i < r.losses.size(); ++i) {
          double slowest = 0;
          for (const auto& rank : r.step_s) slowest = std::max(slowest, rank[i]);
          std::cout << fmt::format("  step {}: loss {:.6f}, {:.3f} s (slowest rank)\n", i, r.losses[i], slowest);
        }
        if (run_compare) {
          // The simulator's ranks stand for every replica with the same costs
          // (the first replica's row); the run's are one per replica.
          const int P = simulated.exec.schedule.num_ranks;
          loom::TextTable t({"rank", "simulated busy", "measured busy", "measured / simulated"});
          for (int i = 0; i < r.measured.num_ranks(); ++i) {
            const double sim_busy = simulated.result.busy_s[i % static_cast<int>(simulated.result.busy_s.size())];
            t.AddRow({fmt::format("replica {} {}", i / P, simulated.exec.ranks[i % P].name),
                      fmt::format("{:.4f} s", sim_busy), fmt::format("{:.4f} s", r.measured.busy_s[i]),
                      fmt::format("{:.2f}x", r.measured.busy_s[i] / sim_busy)});
          }
          std::cout << fmt::format("\nlast step: simulated {:.4f} s ({}), measured {:.4f} s\n",
                                   simulated.metrics.iteration_time_s,
                                   loom::CostModelOf(cluster).name(), r.measured.iteration_time_s)
                    << t.Render();
          // Memory: each process's peak tensor bytes (weights, gradients,
          // optimizer state, activations) beside its GPU group's simulated peak.
          const auto& sim_mem = simulated.group_peak_mem_bytes;
          if (!sim_mem.empty() && r.peak_tensor_bytes.size() == sim_mem.size() * p.group_gpus) {
            loom::TextTable m({"process", "simulated peak", "measured peak tensors", "measured / simulated"});
            for (size_t i = 0; i < r.peak_tensor_bytes.size(); ++i) {
              const double s = sim_mem[i / p.group_gpus];
              m.AddRow({fmt::format("{} (GPU group {})", i, i / p.group_gpus), loom::HumanBytes(s),
                        loom::HumanBytes(r.peak_tensor_bytes[i]), fmt::format("{:.2f}x", r.peak_tensor_bytes[i] / s)});
            }
            std::cout << "\n" << m.Render();
          }
        }
      }
#else
      (void)p;
      throw loom::Error("loom run: this build has no runtime (a fuzz build); `make` builds one with "
                        "the PyTorch that scripts/install-deps.sh installs");
#endif
    }
    if (app.got_subcommand("simulate") && !sim_plan.empty()) {
      loom::Model model = loom::LoadModel(sim_model);
      loom::Cluster cluster = LoadClusterWithProfile(sim_cluster, sim_profile);
      std::optional<loom::Workload> w = sim_workload.Resolve(&model);
      loom::Workload workload = w ? *w : loom::DefaultWorkload(model);
      loom::PlanFile file = loom::LoadPlanFile(sim_plan, sim_strategy);
      const loom::Plan& p = file.plan;
      CheckPlanIsFor(p, model, cluster, workload, sim_plan);
      if (file.batches.empty()) file.batches.push_back({0, std::nullopt, 0.0});
      nlohmann::json batches = nlohmann::json::array();
      std::string lines;
      double sum_s = 0;
      loom::PlanRun first;
      for (size_t b = 0; b < file.batches.size(); ++b) {
        const loom::RecordedBatch& rb = file.batches[b];
        loom::SimOptions opt;
        opt.record_timelines = b == 0;
        const loom::Batch batch = loom::DrawBatch(workload, rb.iteration);
        std::optional<loom::IterationSchedule> own;
        if (!rb.schedule && loom::FindStrategy(p.strategy) != nullptr && loom::SchedulesBatches(p.strategy)) {
          // A plan of a strategy that schedules every batch, with none recorded: its own schedule.
          own = loom::ScheduleBatch(p.strategy, loom::StrategyContext{model, cluster, workload, batch, {}}, p, batch,
                                    rb.iteration);
        }
        loom::PlanRun run = loom::ReplayBatch(model, cluster, workload, p, batch,
                                              rb.schedule ? &*rb.schedule : (own ? &*own : nullptr), opt);
        loom::CheckFits(run, fmt::format("{} batch {}", sim_plan, rb.iteration));
        const double t = run.metrics.iteration_time_s;
        sum_s += t;
        nlohmann::json jb = {{"iteration", rb.iteration}, {"iteration_time_s", t}};
        if (rb.iteration_time_s > 0) jb["recorded_iteration_time_s"] = rb.iteration_time_s;
        batches.push_back(std::move(jb));
        lines += fmt::format("  batch {}{}: {:.3f} s", rb.iteration,
                             rb.schedule ? " (its schedule)" : (own ? " (the strategy's schedule)" : ""), t);
        if (rb.iteration_time_s > 0) {
          lines += t == rb.iteration_time_s ? fmt::format(" (recorded {:.3f} s, equal)", rb.iteration_time_s)
                                            : fmt::format(" (recorded {:.3f} s, DIFFERS)", rb.iteration_time_s);
        }
        lines += "\n";
        if (b == 0) first = std::move(run);
      }
      if (!trace_path.empty()) {
        loom::WriteChromeTrace(trace_path, loom::ChromeTrace(first.result, first.exec.schedule, RankNames(first)));
      }
      if (!sim_export_csv.empty()) lines += ExportPytorchCsv(first, sim_export_csv, sim_csv_comms);
      const auto& m = first.metrics;
      const double mean_s = sum_s / static_cast<double>(file.batches.size());
      nlohmann::json j = loom::PlanMetricsJson(m);
      j["iteration_time_s"] = mean_s;
      j["batches"] = batches;
      std::cout << (sim_json ? j.dump(2) + "\n"
                             : fmt::format("plan {} ({}): {:.3f} s per iteration over {} batch(es); batch {}: MFU "
                                           "{:.1f}%, bubble {:.1f}%, peak {} per GPU\n{}",
                                           sim_plan, p.strategy, mean_s, file.batches.size(),
                                           file.batches[0].iteration, 100 * m.mfu, 100 * m.bubble_ratio,
                                           loom::HumanBytes(m.peak_mem_bytes), lines));
    } else if (app.got_subcommand("simulate")) {
      cfg.schedule = loom::ParseScheduleKind(sim_schedule, "--schedule");
      cfg.recompute = loom::ParseRecompute(recompute, "--recompute");
      loom::Model model = loom::LoadModel(sim_model);
      std::optional<loom::Workload> w = sim_workload.Resolve(&model);
      loom::Workload workload = w ? *w : loom::DefaultWorkload(model);
      const loom::Cluster sim_c = LoadClusterWithProfile(sim_cluster, sim_profile);
      std::optional<loom::ImportedPytorchSchedule> imported;
      if (!sim_import_csv.empty()) {  // PP, stages per rank and microbatches are the file's
        imported = loom::ImportPytorchSchedule(
            loom::ParsePytorchCsv(loom::ReadTextFile(sim_import_csv), sim_import_csv), sim_import_csv);
        cfg.pp = imported->pp;
        cfg.vpp = imported->num_stages / imported->pp;
        cfg.microbatches = imported->num_microbatches;
      }
      // --dp left out: what TP x PP x CP leave of the cluster (issue 22).
      if (app.get_subcommand("simulate")->get_option("--dp")->count() == 0 && cfg.tp > 0 && cfg.pp > 0 && cfg.cp > 0 &&
          sim_c.num_gpus() % (cfg.tp * cfg.pp * cfg.cp) == 0) {
        cfg.dp = sim_c.num_gpus() / (cfg.tp * cfg.pp * cfg.cp);
      }
      loom::PlanRun run = imported ? loom::SimulatePytorchSchedule(model, sim_c, workload, cfg, *imported,
                                                                   sim_import_csv)
                                   : loom::SimulateConfig(model, sim_c, workload, cfg);
      if (!trace_path.empty()) {
        loom::WriteChromeTrace(trace_path, loom::ChromeTrace(run.result, run.exec.schedule, RankNames(run)));
      }
      std::string exported;
      if (!sim_export_csv.empty()) exported = ExportPytorchCsv(run, sim_export_csv, sim_csv_comms);
      const auto& m = run.metrics;
      if (sim_json) {
        std::cout << loom::PlanMetricsJson(m).dump(2) << "\n";
      } else {
        std::cout << loom::FormatPlanRun(run, model, workload,
                                         fmt::format("tp {} pp {} dp {} cp {} vpp {}, {} microbatches{}", cfg.tp,
                                                     cfg.pp, cfg.dp, cfg.cp, cfg.vpp, cfg.microbatches,
                                                     imported ? ", the order of " + sim_import_csv : ""))
                  << exported;
      }
    }
  } catch (const loom::Error& e) {
    std::cerr << "loom: error: " << e.what() << "\n";
    return 2;
  } catch (const std::bad_alloc&) {  // rule 4: nothing aborts
    std::cerr << "loom: error: out of memory: the problem is larger than this machine holds (cluster, global batch, "
                 "iterations or model size)\n";
    return 2;
  } catch (const std::exception& e) {
    LOOM_ON_INTERNAL_ERROR();
    std::cerr << "loom: error: internal error (a bug; please report it with the command): " << e.what() << "\n";
    return 2;
  }
  return 0;
}
