#include "loom/cli/run_flags.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <stdexcept>

#include "loom/cli/flag_checks.h"
#include "loom/cli/output_file.h"
#include "loom/error.h"
#ifdef LOOM_HAVE_RUNTIME
#include "loom/weights/run_checkpoint.h"
#endif

namespace loom::cli {

void RunFlags::Add(CLI::App* run) {
#ifdef LOOM_HAVE_RUNTIME
  const double max_timeout_s = kMaxTimeout_s;
  const int max_threads = MaxThreadsPerRank();
#else  // a build without the runtime refuses `loom run` whatever its flags
  const double max_timeout_s = 1e9;
  const int max_threads = 1 << 20;
#endif
  run->add_option("--model", model, "built-in model name or YAML file")->required();
  run->add_option("--cluster", cluster, "the cluster the plan was made for")->required();
  CLI::Option* plan_option =
      run->add_option("--plan", plan,
                      "plan JSON file (a plan or a `loom plan --json` output); else the layout the "
                      "Megatron flags below describe");
  run->add_option("--strategy", strategy, "with a `loom plan --json` file: whose plan (default: the best)");
  workload.Add(run);
  run->add_option("--data", data,
                  "a JSONL file of tokenized samples, {\"input_ids\": [...], \"labels\": [...]} a line: the workload "
                  "(docs/workloads.md)");
  run->add_option("--save", save,
                  "write the trained weights as a Hugging Face model folder DIR (model.safetensors + config.json) "
                  "that transformers' from_pretrained loads; --model must be a Hugging Face folder or config.json")
      ->check(kOutputFolder);
  run->add_option("--steps", steps, "training steps")->check(kPositiveInt);
  run->add_option("--timeout", timeout_s, "seconds a rank may stay silent before the run fails")
      ->check(RealIn(0, max_timeout_s));
  // Bounded to what the workers' fp32 AdamW can hold (a float).
  run->add_option("--lr", lr, "AdamW's peak learning rate (default 1e-3)")->check(RealIn(0, 1e38))->group("Training");
  run->add_option("--lr-schedule", lr_schedule, "after the warmup: constant | linear | cosine (default constant)")
      ->group("Training");
  run->add_option("--warmup-steps", warmup_steps, "steps the learning rate rises from 0 to --lr (default 0)")
      ->check(kNotNegativeInt)
      ->group("Training");
  run->add_option("--decay-steps", decay_steps,
                  "steps the schedule spans, warmup included (default: --steps; set it to resume a longer schedule)")
      ->check(kNotNegativeInt)
      ->group("Training");
  run->add_option("--min-lr-ratio", min_lr_ratio, "where linear and cosine end, as a fraction of --lr (default 0)")
      ->group("Training");
  run->add_option("--weight-decay", weight_decay,
                  "AdamW's decoupled weight decay on matrices and embeddings; never on norms or biases (default 0.01)")
      ->group("Training");
  run->add_option("--clip-grad", clip_grad, "clip the gradients' global L2 norm to this (default 1; 0: off)")
      ->group("Training");
  run->add_flag("--skip-nonfinite", skip_nonfinite,
                "skip a step whose loss or gradient norm is not finite (counted and reported) instead of stopping")
      ->group("Training");
  run->add_option("--metrics", metrics, "write a JSONL line per step: loss, grad norm, lr, time, tokens/s, MFU")
      ->check(kOutputFile)
      ->group("Training");
  run->add_option("--report", report, "write an HTML run report: loss, grad norm, lr and tokens/s over the steps")
      ->check(kOutputFile)
      ->group("Training");
  run->add_option("--loss-scale", loss_scale, "fp16: a constant loss scale (default: dynamic)")
      ->group("fp16 loss scaling");
  run->add_option("--initial-loss-scale", initial_loss_scale, "fp16: the dynamic loss scale's start (default 65536)")
      ->group("fp16 loss scaling")
      ->excludes("--loss-scale");
  run->add_option("--loss-scale-window", loss_scale_window,
                  "fp16: clean steps before the dynamic scale doubles (default 1000)")
      ->check(kPositiveInt)
      ->group("fp16 loss scaling")
      ->excludes("--loss-scale");
  run->add_option("--hysteresis", hysteresis, "fp16: overflows before the dynamic scale halves (default 2)")
      ->check(kPositiveInt)
      ->group("fp16 loss scaling")
      ->excludes("--loss-scale");
  run->add_option("--kill-rank", kill_rank, "fault injection: this rank exits at the start of --kill-step")
      ->check(kNotNegativeInt)
      ->group("");
  run->add_option("--kill-step", kill_step, "fault injection step")->check(kNotNegativeInt)->group("");
  run->add_option("--fault-tolerance", fault_tolerance,
                  "survive failed nodes as Oobleck does (an Oobleck plan for this F; without --plan, planned here): "
                  "re-instantiate pipelines from its templates, copy lost layers from surviving replicas, replay the "
                  "interrupted step")
      ->check(CLI::Range(0, 1000))
      ->group("Fault tolerance");
  run->add_option("--kill", kills,
                  "PROCESS:STEP:ACTIONS: worker PROCESS kills itself (SIGKILL) in STEP after ACTIONS of its actions; "
                  "repeatable")
      ->group("Fault tolerance");
  run->add_option("--hang", hangs,
                  "PROCESS:STEP:ACTIONS: as --kill, but the worker stops (SIGSTOP) and is found "
                  "by its missing heartbeats; repeatable")
      ->group("Fault tolerance");
  run->add_option("--rejoin", rejoins, "NODE:STEP: a failed node comes back before STEP; repeatable")
      ->group("Fault tolerance");
  run->add_option("--heartbeat-timeout", heartbeat_timeout_s, "seconds without a heartbeat before a worker is dead")
      ->check(kPositive)
      ->group("Fault tolerance");
  run->add_option("--checkpoint-dir", checkpoint_dir,
                  "save training checkpoints into DIR (DIR/step-N, DIR/latest): at the end and every "
                  "--checkpoint-every steps; plan-independent, so a run resumes under another plan. A "
                  "fault-tolerant run that cannot recover saves there too (default: its run directory)")
      ->group("Checkpoints");
  run->add_option("--checkpoint-every", checkpoint_every,
                  "also save every K steps (with --fault-tolerance and no --checkpoint-dir: into its run "
                  "directory, for failures that take every holder of a layer at once)")
      ->check(kNotNegativeInt)
      ->group("Checkpoints");
  run->add_option("--keep-checkpoints", keep_checkpoints,
                  "with --checkpoint-dir: the newest K kept (default 2; 0: all)")
      ->check(kNotNegativeInt)
      ->group("Checkpoints");
  run->add_option("--resume", resume,
                  "continue from a checkpoint: a --checkpoint-dir folder (its latest) or one step-N folder in it, "
                  "under this or another plan, fault-tolerant or not (--steps counts from the run's start)")
      ->group("Checkpoints");
  run->add_flag("--json", json, "print JSON");
  run->add_option("--nnodes", nnodes, "machines in the run (default: NNODES, else 1)")->check(IntIn(1, 1 << 16));
  run->add_option("--node-rank", node_rank, "this machine's index (default: NODE_RANK, else 0)")
      ->check(IntIn(0, 1 << 16));
  run->add_option("--master", master, "ADDR:PORT of node 0's store (default: MASTER_ADDR:MASTER_PORT)");
  run->add_option("--host", host,
                  "this machine's address for Gloo (default: 127.0.0.1 on one node, else its hostname)");
  run->add_option("--trace", trace, "write a Chrome trace (Perfetto) of the last step as it ran")->check(kOutputFile);
  run->add_option("--kernel-trace", kernel_trace,
                  "write each process's last step as PyTorch's profiler saw it (every operator, and on a GPU every "
                  "kernel) to DIR/process-N.json, Chrome traces (Perfetto)");
  run->add_option("--timeline", timeline,
                  "write an SVG of the last step as predicted (top) and as it ran (bottom), on one time axis")
      ->check(kOutputFile);
  run->add_flag("--compare", compare, "print the simulator's prediction of the last step beside what ran");
  run->add_option("--profile", profile, "cost model for --compare (default|roofline|FILE)");
  run->add_option("--tp", layout.tp, "without --plan: tensor parallel degree")->check(kPositiveInt);
  run->add_option("--pp", layout.pp, "without --plan: pipeline parallel degree")->check(kPositiveInt);
  run->add_option("--dp", layout.dp, "without --plan: data parallel degree")->check(kPositiveInt);
  run->add_option("--cp", layout.cp, "without --plan: context parallel degree (ring attention)")->check(kPositiveInt);
  run->add_option("--vpp", layout.vpp, "without --plan: virtual stages per rank (interleaved)")->check(kPositiveInt);
  run->add_option("--microbatches", layout.microbatches, "without --plan: microbatches per replica")
      ->check(kPositiveInt);
  run->add_option("--schedule", schedule, "without --plan: gpipe | 1f1b | interleaved | zb-h1");
  run->add_option("--recompute", recompute, "without --plan: none | selective | full")
      ->check(CLI::IsMember({"none", "selective", "full"}));
  run->add_option("--device", device, "cpu (Gloo) | cuda (one GPU per process, NCCL)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  run->add_option("--sm-quotas", sm_quotas,
                  "cuda: on runs SM-quota stages on green contexts (default); off runs them on one stream, "
                  "one after another (the ablation)")
      ->check(CLI::IsMember({"on", "off"}));
  run->add_option("--threads", threads, "intra-op threads per rank (default 1)")->check(IntIn(1, max_threads));
  // The layout flags describe a plan: beside --plan they would be ignored.
  for (const char* name : {"--tp", "--pp", "--dp", "--cp", "--vpp", "--microbatches", "--schedule", "--recompute"}) {
    run->get_option(name)->excludes(plan_option);
  }
}

#ifdef LOOM_HAVE_RUNTIME

namespace {

// "1:2:5" -> {1, 2, 5}: `parts` integers separated by ':'. Throws loom::Error
// naming `flag` and the form it takes otherwise.
std::vector<int> ParseColonInts(const std::string& text, const char* flag, int parts) {
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
}

// The environment variable `name`, empty when unset.
std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return std::string(v ? v : "");
}

}  // namespace

RunOptions RunFlags::BasicOptions(Precision precision) const {
  RunOptions o;
  o.steps = steps;
  o.timeout_s = timeout_s;
  o.training.lr = lr;
  o.training.schedule = runtime::ParseLrSchedule(lr_schedule);
  o.training.warmup_steps = warmup_steps;
  o.training.decay_steps = decay_steps;
  o.training.min_lr_ratio = min_lr_ratio;
  o.training.weight_decay = weight_decay;
  o.training.clip_grad = clip_grad;
  o.training.skip_nonfinite = skip_nonfinite;
  o.kill_rank = kill_rank;
  o.kill_step = kill_step;
  o.threads_per_rank = threads;
  o.device = ParseDevice(device);
  o.sm_quotas = sm_quotas == "on";
  o.save_dir = save;
  o.kernel_trace_dir = kernel_trace;
  const bool scaling = loss_scale || initial_loss_scale || loss_scale_window || hysteresis;
  if (scaling && precision != Precision::kFp16) {
    throw loom::Error(
        fmt::format("--loss-scale, --initial-loss-scale, --loss-scale-window and --hysteresis act on "
                    "fp16 training; this run's precision is {}: add --precision fp16",
                    PrecisionName(precision)));
  }
  if (loss_scale) {
    o.loss_scale.dynamic = false;
    o.loss_scale.initial_scale = *loss_scale;
  }
  if (initial_loss_scale) o.loss_scale.initial_scale = *initial_loss_scale;
  if (loss_scale_window) o.loss_scale.growth_interval = *loss_scale_window;
  if (hysteresis) o.loss_scale.hysteresis = *hysteresis;
  return o;
}

void RunFlags::AddFaultTolerance(RunOptions& o) const {
  if ((!kills.empty() || !hangs.empty() || !rejoins.empty()) && fault_tolerance < 0) {
    throw loom::Error("--kill, --hang and --rejoin act on a fault-tolerant run: add --fault-tolerance F");
  }
  for (const auto& k : kills) {
    const auto v = ParseColonInts(k, "--kill", 3);
    o.kills.push_back({v[0], v[1], v[2], false});
  }
  for (const auto& k : hangs) {
    const auto v = ParseColonInts(k, "--hang", 3);
    o.kills.push_back({v[0], v[1], v[2], true});
  }
  for (const auto& j : rejoins) {
    const auto v = ParseColonInts(j, "--rejoin", 2);
    o.rejoins.push_back({v[0], v[1]});
  }
  // Fault-tolerant or not, a run saves and resumes training checkpoints (weights/run_checkpoint.h).
  o.fault_tolerant = fault_tolerance >= 0;
  o.heartbeat_timeout_s = heartbeat_timeout_s;
  o.checkpoint_every = checkpoint_every;
  o.checkpoint_root = checkpoint_dir;
  o.keep_checkpoints = keep_checkpoints.value_or(2);
  if (keep_checkpoints && checkpoint_dir.empty()) {
    throw loom::Error("--keep-checkpoints: acts on --checkpoint-dir's checkpoints; add --checkpoint-dir DIR");
  }
  if (checkpoint_every > 0 && fault_tolerance < 0 && checkpoint_dir.empty()) {
    throw loom::Error("--checkpoint-every: add --checkpoint-dir DIR (or --fault-tolerance F for its own checkpoints)");
  }
  if (!checkpoint_dir.empty() && !save.empty()) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::path a = fs::weakly_canonical(checkpoint_dir, ec), b = fs::weakly_canonical(save, ec);
    if (a == b || Inside(a, b) || Inside(b, a)) {
      throw loom::Error(
          fmt::format("--checkpoint-dir {} and --save {}: one holds the other; a training checkpoint "
                      "and a transformers model folder each need their own folder",
                      checkpoint_dir, save));
    }
  }
  if (!resume.empty()) o.resume_checkpoint = weights::FindCheckpoint(resume);
}

void RunFlags::AddMachines(RunOptions& o) const {
  o.nnodes = nnodes > 0 ? nnodes : (Env("NNODES").empty() ? 1 : ParseIntIn(Env("NNODES"), "NNODES", 1, 1 << 16));
  o.node_rank = node_rank >= 0 ? node_rank
                               : (Env("NODE_RANK").empty() ? 0 : ParseIntIn(Env("NODE_RANK"), "NODE_RANK", 0, 1 << 16));
  std::string addr_port = master;
  if (addr_port.empty() && !Env("MASTER_ADDR").empty()) addr_port = Env("MASTER_ADDR") + ":" + Env("MASTER_PORT");
  if (!addr_port.empty()) {
    const auto colon = addr_port.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == addr_port.size()) {
      throw loom::Error(fmt::format("--master: '{}'; valid: ADDR:PORT, e.g. 10.0.0.1:29500", addr_port));
    }
    o.master_addr = addr_port.substr(0, colon);
    o.port = static_cast<int>(
        ParseIntIn(addr_port.substr(colon + 1), master.empty() ? "MASTER_PORT" : "--master port", 1, kMaxPort));
  }
  if (!host.empty()) {
    o.host = host;
  } else if (o.nnodes > 1) {
    char name[256] = {0};
    gethostname(name, sizeof(name) - 1);
    o.host = name;
  }
}

#endif  // LOOM_HAVE_RUNTIME

}  // namespace loom::cli
