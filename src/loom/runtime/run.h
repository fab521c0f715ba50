// Runs a Plan for real on this machine (issue 14, first step): one worker
// process per rank of the compiled ExecutionPlan, libtorch for tensors and
// autograd, c10d for communication (Gloo over a TCPStore on 127.0.0.1). Each
// worker walks its rank's action list: forward and backward of its stages,
// point-to-point sends and receives of activations and gradients, the wait and
// the AdamW step. What runs is exactly what the simulator prices.
//
// Supported so far: one unit with one pipeline template, any number of
// data-parallel replicas (gradients averaged over each stage's replicas with
// Gloo all-reduce), Megatron tensor parallelism (groups of tp GPUs, cp 1), one
// process per GPU, every schedule the plan compiles (GPipe, 1F1B,
// interleaved; ZB-H1's weight pass runs inside its data pass), text models of
// embedding, transformer and untied LM-head layers, the `text` workload.
// Anything else is a loom::Error naming what is missing. Built only when
// libtorch is found (LOOM_HAVE_RUNTIME).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "loom/plan/plan.h"
#include "loom/plan/replanner.h"
#include "loom/runtime/loss_scaler.h"
#include "loom/runtime/training_options.h"
#include "loom/sim/sim_result.h"
#include "loom/spec/cluster.h"
#include "loom/spec/model.h"
#include "loom/spec/workload.h"

namespace loom {

// Fault injection of a fault-tolerant run: worker `process` (numbered as
// launched; workers that join later continue the count) kills itself with
// SIGKILL in step `step` after `after_actions` of its actions (at least the
// step's count: after everything, its optimizer step included, before the
// step commits), or stops with SIGSTOP
// (`hang`: a worker that no longer answers, found by its missing heartbeats).
struct InjectedFault {
  int process = 0;
  int step = 0;
  int after_actions = 0;
  bool hang = false;
};
// Node `node` (of the cluster the run started on) comes back before step `step`.
struct NodeRejoin {
  int node = 0;
  int step = 0;
};

// What a run's workers compute on.
enum class Device {
  kCpu,   // host tensors and Gloo
  kCuda,  // one GPU per process of this node (NCCL cannot share a GPU between ranks) and NCCL groups
};
// "cpu" or "cuda"; throws loom::Error naming `flag` and the valid names.
Device ParseDevice(const std::string& name, const std::string& flag = "--device");
const char* DeviceName(Device device);

// Bounds of RunOptions' numbers (c10d takes the timeout in milliseconds;
// more threads than the machine's cores only slow each other).
inline constexpr double kMaxTimeout_s = 7 * 24 * 3600.0;
inline constexpr int kMaxPort = 65535;
int MaxThreadsPerRank();  // the machine's hardware threads

// A step as the launcher sees it once it is done (RunOptions::on_step).
struct StepProgress {
  int step = 0;
  double loss = 0, grad_norm = 0, lr = 0;  // NaN where not known (an fp16 overflow)
  bool skipped = false;                    // a non-finite step --skip-nonfinite skipped
  double seconds = 0;                      // its wall time
  double data_wait_s = 0, data_load_s = 0;  // its batch: waited for, and loaded off the critical path
};

struct RunOptions {
  int steps = 3;
  // The learning rate, its schedule, weight decay, clipping and what a
  // non-finite step does (runtime/training_options.h).
  runtime::TrainingOptions training;
  double timeout_s = 60;  // a rank silent this long fails the run
  int port = 0;           // TCPStore port; 0 picks a free one
  int kill_rank = -1;     // tests: this rank exits abruptly at the start of step `kill_step`
  int kill_step = -1;
  // Intra-op threads of each rank's libtorch, as `loom profile --threads`
  // measures them. 1 by default: on the 2-core VM a forked worker at 2 threads
  // ran a step 2.4-4.8x slower than at 1 (docs/runtime.md).
  int threads_per_rank = 1;
  Device device = Device::kCpu;
  // CUDA: run the stages that hold an SM quota on green-context streams
  // (Mosaic's engine). false runs the same plan with every rank on the
  // device's default stream, one action after another: the ablation that
  // says what spatial multiplexing itself buys. No effect on a CPU.
  bool sm_quotas = true;
  int local_processes = 1;  // set by the launcher: processes on this node
  // Several machines, the way torchrun joins them: every node runs `loom run`
  // with the same plan and its own node_rank; processes are numbered node by
  // node; process 0 (on node 0) serves the store on master_addr:port; each
  // process's Gloo device binds to `host` (this node's address).
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  std::string host = "127.0.0.1";
  // Fault tolerance (`--fault-tolerance F`, one node; runtime/fault_tolerance.h):
  // on a node's failure the run re-plans through its Replanner and goes on;
  // when it cannot, its survivors save a checkpoint in `checkpoint_root`
  // (or, when none is given, in the run's directory) and it stops.
  bool fault_tolerant = false;
  std::vector<InjectedFault> kills;
  std::vector<NodeRejoin> rejoins;
  double heartbeat_s = 0.1;          // a worker's heartbeat period
  double heartbeat_timeout_s = 3.0;  // a worker silent this long is dead
  // Training checkpoints (`--checkpoint-dir D`, weights/run_checkpoint.h),
  // fault-tolerant or not: saved every checkpoint_every steps (0: at the end
  // only) and at the run's end, the newest `keep_checkpoints` kept (0: all).
  std::string checkpoint_root;
  int checkpoint_every = 0;
  int keep_checkpoints = 2;
  // `--resume D` of such a checkpoint: the step folder to start from (set by
  // the launcher, weights::FindCheckpoint); its steps are skipped.
  std::string resume_checkpoint;
  std::string plan_label;  // what the manifest says wrote it
  // The workload's data stream (data/data_identity.h), recorded in every
  // checkpoint: set by the launcher where the run saves or resumes one.
  std::string data_stream;
  // A Hugging Face model folder whose safetensors the stages start from
  // (`loom run --model DIR`; runtime/hf_weights.h); "": the seeded weights.
  std::string weights_dir;
  // `loom run --save DIR`: the trained weights as a Hugging Face model folder
  // (runtime/hf_save.h); "": not saved. save_dtype is set by the launcher
  // (config.json's dtype) for its workers.
  std::string save_dir;
  std::string save_dtype;
  // `loom run --kernel-trace DIR`: each worker's last step under PyTorch's
  // profiler, as DIR/process-N.json (runtime/kernel_trace.h); "": none.
  std::string kernel_trace_dir;
  // The workload's precision fp16: its loss scaling (`--loss-scale`,
  // `--initial-loss-scale`, `--loss-scale-window`, `--hysteresis`).
  runtime::LossScaleOptions loss_scale;
  // Called on the launcher as each step ends (from this node's first
  // process's report), in step order; not copied into workers' use.
  std::function<void(const StepProgress&)> on_step;

  // Throws loom::Error naming the flag of the first option that no plan
  // could run with (steps, timeout, node rank, threads; under fault
  // tolerance: one CPU machine, the checkpoint period, the heartbeats).
  // RunLocally and RunFaultTolerant call it before anything else.
  void Validate() const;
};

// A TCP port on 127.0.0.1 that was free a moment ago (for a rendezvous store).
int FreePort();

// A multi-node run's launcher sees only its own node's processes: what they
// report (losses come from the node holding the last pipeline stage; other
// nodes' `losses` are NaN).
struct RunResult {
  std::vector<double> losses;               // per step: the global batch's mean loss
  // fp16 (runtime/loss_scaler.h), per step: the loss scale it ran with, and
  // whether its gradients overflowed, so that it changed no weight. Empty otherwise.
  std::vector<double> loss_scales;
  std::vector<bool> skipped;
  // Per step, as the run saw it (the Metrics of the node's first process):
  // the gradients' global norm before clipping, the learning rate, and
  // whether a non-finite loss or norm skipped it (--skip-nonfinite).
  std::vector<double> grad_norms, lrs;
  std::vector<bool> nonfinite_skipped;
  std::vector<std::vector<double>> step_s;  // [rank][step] wall time of the step
  std::vector<std::vector<double>>
      params;  // [process] per parameter tensor: sum, sum of squares, sum of |w| (replica 0's)
  // What ran in the last step, in the simulator's terms (so sim/chrome_trace
  // writes it and it opens beside a simulated trace): one simulated rank per
  // pipeline rank of each replica (TP shard 0), replica-major; intervals index
  // the last step's ExecutionPlan actions, times from the step's start; busy_s
  // sums each rank's compute actions; iteration_time_s is the slowest rank's step.
  SimResult measured;
  std::vector<double> peak_rss_bytes;  // [process] peak resident memory (CPU)
  // [process] peak bytes of live tensors (tensor_memory.h): the weights of its
  // stages plus the peak of what the steps allocated (activations, gradients,
  // optimizer state); what the simulator's per-GPU peak predicts.
  std::vector<double> peak_tensor_bytes;
  std::vector<std::string> notes;  // what workers said about the run ("phase 0: 2 green context(s) ...")
  // `--model DIR` with weights: the checkpoint's tensors the workers read, and
  // those no layer of the model reads (transformers' "unused weights": a
  // LLaVA's vision layers past its feature layer, CLIP's post_layernorm, or
  // another model's), which --save carries over unchanged.
  std::vector<std::string> checkpoint_tensors_read, unread_checkpoint_tensors;
  // A fault-tolerant run: what happened to its nodes, in order.
  struct NodeEvent {
    int step = 0;              // the step the new generation starts at
    std::string kind;          // "failure" or "join"
    std::vector<int> nodes;    // the nodes lost or back
    std::string outcome;       // the re-planner's account
    double detect_s = 0;       // failure: from the worker's death to the launcher noticing it
    double recover_s = 0;      // from noticing to every worker of the new generation ready
    double lost_s = 0;         // failure: work thrown away (the interrupted step's start to the failure) + recover_s
    int64_t copied_bytes = 0;  // layer state the new generation's workers received
    int processes = 0;         // the new generation's workers
    // A recovery that restored a checkpoint instead of the survivors' copy:
    // the checkpoint folder ("the start": the initial state) and the
    // committed steps run again since it.
    std::string restored_from;
    int replayed_steps = 0;
  };
  std::vector<NodeEvent> events;
  int first_step = 0;   // > 0: resumed from a checkpoint
  Plan final_plan;      // the plan the last generation ran
  int final_nodes = 0;  // on this many nodes
};

// Throws loom::Error for what the runtime cannot run yet, and when a worker
// fails or goes silent, naming the rank and why.
// `schedules`: per step, the strategy's IterationSchedule of that step's batch
// (strategies that schedule every batch: PipeWeaver's woven pipelines,
// MMScale's reordering); absent or shorter: the plan compiled on its own.
// A fault-tolerant run (options.fault_tolerant) re-plans through `replanner`
// (the strategy's; Oobleck's templates) and throws loom::Error with its
// "cannot recover" outcome once it cannot go on, after writing the checkpoint.
RunResult RunLocally(const Model& model, const Cluster& cluster, const Workload& workload, const Plan& plan,
                     const RunOptions& options, const std::vector<std::optional<IterationSchedule>>& schedules = {},
                     const Replanner& replanner = {});

}  // namespace loom
