// `loom run`'s flags: what to run (a plan file, Oobleck's plan for
// --fault-tolerance F, else the Megatron-LM layout of --tp/--pp/...), how
// (steps, device, threads), on which machines, with which injected faults,
// and what to print beside it. Turned into the runtime's RunOptions here, so
// that run_command.cpp reads as the run's steps.
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <vector>

#include "loom/cli/common_flags.h"
#include "loom/spec/precision.h"
#include "loom/strategies/baselines/megatron_config.h"
#ifdef LOOM_HAVE_RUNTIME
#include "loom/runtime/run.h"
#endif

namespace loom::cli {

struct RunFlags {
  // What runs.
  std::string model;
  std::string cluster;   // the cluster the plan was made for
  std::string plan;      // a plan file; empty: Oobleck's plan (fault_tolerance >= 0) or the layout below
  std::string strategy;  // whose plan of a `loom plan --json` file; empty: the best
  WorkloadFlags workload;
  std::string data;  // --data FILE.jsonl: tokenized samples as the workload
  std::string save;  // --save DIR: the trained weights as a Hugging Face folder
  // Without --plan: a Megatron-LM layout, as `loom simulate` takes it.
  ParallelConfig layout;
  std::string schedule = "1f1b";
  std::string recompute = "none";

  // How it runs.
  int steps = 3;
  double timeout_s = 60;
  double lr = 1e-3;
  // The training loop (runtime/training_options.h).
  std::string lr_schedule = "constant";
  int warmup_steps = 0, decay_steps = 0;
  double min_lr_ratio = 0, weight_decay = 0.01, clip_grad = 1.0;
  bool skip_nonfinite = false;
  std::string metrics;  // --metrics FILE.jsonl: a line per step
  std::string report;   // --report FILE.html: the training curves
  // fp16's loss scaling (runtime/loss_scaler.h), Megatron-LM's flags: unset
  // values keep LossScaleOptions' defaults.
  std::optional<double> loss_scale, initial_loss_scale;
  std::optional<int> loss_scale_window, hysteresis;
  int kill_rank = -1;  // hidden: tests' fault injection without fault tolerance
  int kill_step = -1;
  std::string device = "cpu";
  std::string sm_quotas = "on";
  int threads = 1;

  // Fault tolerance (Oobleck's): -1 is off.
  int fault_tolerance = -1;
  std::vector<std::string> kills;    // PROCESS:STEP:ACTIONS
  std::vector<std::string> hangs;    // PROCESS:STEP:ACTIONS
  std::vector<std::string> rejoins;  // NODE:STEP
  double heartbeat_timeout_s = 3;
  std::string resume;
  int checkpoint_every = 0;
  std::string checkpoint_dir;  // --checkpoint-dir: training checkpoints
  std::optional<int> keep_checkpoints;  // default 2

  // Several machines, torchrun-style; unset values come from the environment.
  int nnodes = 0;
  int node_rank = -1;
  std::string master;  // ADDR:PORT
  std::string host;

  // What is printed and written beside the run.
  bool json = false;
  std::string trace;
  std::string kernel_trace;  // --kernel-trace DIR: PyTorch's profiler over the last step
  std::string timeline;
  bool compare = false;
  std::string profile = "default";  // the cost model of the prediction beside the run

  // Registers the flags on `run`, in `loom run --help`'s order.
  void Add(CLI::App* run);
  // Whether the simulator's prediction of the last step is needed (--trace, --compare, --timeline).
  bool wants_prediction() const { return !trace.empty() || compare || !timeline.empty(); }

#ifdef LOOM_HAVE_RUNTIME
  // Steps, timeouts, device, fault injection and fp16's loss scaling (which
  // only a `precision` of fp16 takes: loom::Error otherwise).
  RunOptions BasicOptions(Precision precision) const;
  // --kill, --hang, --rejoin, --heartbeat-timeout, --checkpoint*, --resume
  // into `options`. Throws loom::Error for a malformed value or for a fault
  // flag without --fault-tolerance.
  void AddFaultTolerance(RunOptions& options) const;
  // --nnodes, --node-rank, --master and --host into `options`, each else from
  // NNODES, NODE_RANK, MASTER_ADDR:MASTER_PORT (and the hostname on several
  // nodes). Throws loom::Error for a value that is not ADDR:PORT or an integer.
  void AddMachines(RunOptions& options) const;
#endif
};

}  // namespace loom::cli
