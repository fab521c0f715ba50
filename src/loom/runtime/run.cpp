#include "loom/runtime/run.h"

#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <set>
#include <sstream>
#include <thread>

#include "loom/cost/module_summary.h"
#include "loom/data/data_identity.h"
#include "loom/data/sample_source.h"
#include "loom/data/sample_token_checks.h"
#include "loom/error.h"
#include "loom/human_bytes.h"
#include "loom/pipeline/validate.h"
#include "loom/runtime/child_process.h"
#include "loom/runtime/fault_tolerant_run.h"
#include "loom/runtime/hf_save.h"
#include "loom/runtime/kernel_trace.h"
#include "loom/runtime/launcher_signals.h"
#include "loom/runtime/process_layout.h"
#include "loom/runtime/run_reports.h"
#include "loom/runtime/worker.h"
#include "loom/runtime/worker_message.h"
#include "loom/spec/model_identity.h"
#include "loom/weights/checkpoint_weights.h"
#include "loom/weights/run_checkpoint.h"

namespace loom {

int FreePort() {
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  if (s < 0 || bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (s >= 0) close(s);
    throw Error("runtime: cannot find a free TCP port on 127.0.0.1 for the rendezvous store");
  }
  const int port = ntohs(a.sin_port);
  close(s);
  return port;
}

namespace {

struct Child {
  pid_t pid = -1;
  int fd = -1;
  std::string buffer;
  std::vector<std::string> lines;
  bool open = true;
};

// Moves the complete lines of `c`'s buffer to its lines; a step's Metrics
// goes to `on_step` as it arrives (the progress line, --metrics).
void TakeLines(Child& c, const std::function<void(const StepProgress&)>& on_step) {
  size_t nl;
  while ((nl = c.buffer.find('\n')) != std::string::npos) {
    c.lines.push_back(c.buffer.substr(0, nl));
    c.buffer.erase(0, nl + 1);
    if (on_step && c.lines.back().starts_with("metrics ")) {
      const auto m = std::get<runtime::report::Metrics>(runtime::Decode(c.lines.back()));
      on_step(StepProgress{m.step, m.loss, m.grad_norm, m.lr, m.skipped, m.seconds, m.data_wait_s, m.data_load_s});
    }
  }
}

}  // namespace

Device ParseDevice(const std::string& name, const std::string& flag) {
  if (name == "cpu") return Device::kCpu;
  if (name == "cuda") return Device::kCuda;
  throw Error(fmt::format("{} {}; valid: cpu, cuda", flag, name));
}

const char* DeviceName(Device device) { return device == Device::kCuda ? "cuda" : "cpu"; }

int MaxThreadsPerRank() { return std::max(1, static_cast<int>(std::thread::hardware_concurrency())); }

void RunOptions::Validate() const {
  if (steps < 1) throw Error(fmt::format("--steps: must be >= 1, got {}", steps));
  training.Validate(steps);
  if (!(timeout_s > 0 && timeout_s <= kMaxTimeout_s)) {
    throw Error(
        fmt::format("--timeout: {} s is out of range; valid: > 0 and <= {} s (a week)", timeout_s, kMaxTimeout_s));
  }
  if (port < 0 || port > kMaxPort) {
    throw Error(fmt::format("--master port: {} is out of range; valid: 1..{} (0: a free one)", port, kMaxPort));
  }
  if (nnodes < 1 || node_rank < 0 || node_rank >= nnodes) {
    throw Error(
        fmt::format("--node-rank {} with --nnodes {}: the node rank must be in 0..nnodes-1", node_rank, nnodes));
  }
  if (threads_per_rank <= 0 || threads_per_rank > MaxThreadsPerRank()) {
    throw Error(fmt::format("--threads {}: valid: 1..{} (this machine's hardware threads)", threads_per_rank,
                            MaxThreadsPerRank()));
  }
  if (!fault_tolerant) return;
  if (nnodes != 1) throw Error("--fault-tolerance: runs on one machine yet (--nnodes 1)");
  if (device != Device::kCpu) {
    throw Error(
        "--fault-tolerance: runs on --device cpu yet (an NCCL communicator of a dead peer needs aborting, "
        "which is not done yet)");
  }
  if (checkpoint_every < 0) {
    throw Error(fmt::format("--checkpoint-every {}: valid: 0 (none) or a number of steps", checkpoint_every));
  }
  if (!(heartbeat_s > 0) || !(heartbeat_timeout_s > heartbeat_s)) {
    throw Error(fmt::format("--heartbeat-timeout {} s must exceed the heartbeat period {} s", heartbeat_timeout_s,
                            heartbeat_s));
  }
}

namespace {

// --checkpoint-dir and --resume of a training checkpoint, before any worker
// starts: what the run can do, and a checkpoint of this model and data.
void CheckTrainingCheckpoints(const Model& model, const Workload& workload, const RunOptions& options) {
  if (options.checkpoint_root.empty() && options.resume_checkpoint.empty()) return;
  if (options.nnodes > 1) {
    throw Error(
        "--checkpoint-dir and --resume: one machine yet (several would need one shared folder, not checked yet)");
  }
  if (!options.resume_checkpoint.empty()) {
    const weights::RunCheckpointReader reader(options.resume_checkpoint);
    const weights::RunCheckpointManifest& m = reader.manifest();
    const std::string& at = options.resume_checkpoint;
    // The model by what it computes (a renamed folder resumes, another eps
    // does not); a manifest without its lines by the model's name.
    if (!m.model_identity.empty()) {
      if (const std::string d = FirstIdentityDifference(m.model_identity, ModelIdentity(model)); !d.empty()) {
        throw Error(fmt::format(
            "--resume {}: a checkpoint of model '{}', {}: {} (there: the checkpoint's, here: {}); resume it with "
            "the model that wrote it (its checkpoint.json's model_identity)",
            at, m.model,
            m.model == model.name ? "whose architecture is another" : fmt::format("not of this one ('{}')", model.name),
            d, model.source));
      }
    } else if (m.model != model.name) {
      throw Error(fmt::format("--resume {}: a checkpoint of model '{}', not '{}'", at, m.model, model.name));
    }
    if (!m.data_stream.empty() && m.data_stream != options.data_stream) {
      std::string d = FirstIdentityDifference({m.data_stream}, {options.data_stream});
      if (d.empty()) d = fmt::format("'{}' there, '{}' here", m.data_stream, options.data_stream);
      throw Error(fmt::format(
          "--resume {}: the checkpoint's data stream is another than this run's {}: {}; the steps would not "
          "continue it (give the samples it was trained on; to train its weights on other data, start a new run "
          "from them: a Hugging Face model's with --save, then --model)",
          at, workload.source.kind == "jsonl" ? "samples (" + workload.source.path + ")" : "workload", d));
    }
    if (m.seed != workload.seed || m.global_batch != workload.global_batch) {
      throw Error(fmt::format(
          "--resume {}: the checkpoint's data stream is seed {} with global batch {}, this run's seed {} with {}; "
          "the steps would not continue it (give --seed {} --global-batch {})",
          at, m.seed, m.global_batch, workload.seed, workload.global_batch, m.seed, m.global_batch));
    }
    if (m.steps_done >= options.steps) {
      throw Error(
          fmt::format("--resume {}: the checkpoint is after step {} already; --steps {} leaves nothing to "
                      "run (--steps counts from the run's start)",
                      at, m.steps_done, options.steps));
    }
  }
  if (!options.checkpoint_root.empty())
    weights::CheckCheckpointRoot(options.checkpoint_root, options.resume_checkpoint);
}

// The run's workers (fault-tolerant or not) from start to their reports.
RunResult RunWorkers(const Model& model, const Cluster& cluster, const Workload& workload, const Plan& plan,
                     const RunOptions& options, const std::vector<std::optional<IterationSchedule>>& schedules,
                     const Replanner& replanner);
}  // namespace

namespace {

// The checkpoint's tensors no worker read (RunResult::unread_checkpoint_tensors);
// nothing where no worker said what it read (a resumed run reads its own checkpoint).
void NameUnreadTensors(const RunOptions& options, RunResult& r) {
  if (options.weights_dir.empty() || r.checkpoint_tensors_read.empty()) return;
  const std::set<std::string> read(r.checkpoint_tensors_read.begin(), r.checkpoint_tensors_read.end());
  r.checkpoint_tensors_read.assign(read.begin(), read.end());
  for (const std::string& name : weights::CheckpointWeights(options.weights_dir).Names()) {
    if (!read.count(name)) r.unread_checkpoint_tensors.push_back(name);
  }
}

}  // namespace

RunResult RunLocally(const Model& model, const Cluster& cluster, const Workload& workload, const Plan& plan,
                     const RunOptions& given, const std::vector<std::optional<IterationSchedule>>& schedules,
                     const Replanner& replanner) {
  given.Validate();
  RunOptions options = given;
  if (!options.checkpoint_root.empty() || !options.resume_checkpoint.empty() || options.fault_tolerant) {
    options.data_stream = DataStreamIdentity(workload);
  }
  CheckTrainingCheckpoints(model, workload, options);
  if (workload.source.kind == "jsonl") CheckJsonlTokens(model, workload.source.path);
  if (!options.kernel_trace_dir.empty()) runtime::PrepareKernelTraceDir(options.kernel_trace_dir, options.steps);
  if (workload.precision == Precision::kFp16) {
    options.loss_scale.Validate();
  }
  if (options.save_dir.empty()) {
    RunResult result = RunWorkers(model, cluster, workload, plan, options, schedules, replanner);
    NameUnreadTensors(options, result);
    return result;
  }
  // --save: checked before any worker starts, joined once every one finished.
  RunOptions saving = options;
  saving.save_dtype = runtime::PrepareSave(model, options);
  RunResult result;
  try {
    result = RunWorkers(model, cluster, workload, plan, saving, schedules, replanner);
  } catch (...) {  // failed or interrupted: no half-written parts are left in DIR
    runtime::AbandonSave(saving);
    throw;
  }
  runtime::FinishSave(model, saving);
  NameUnreadTensors(options, result);
  return result;
}

namespace {

// What a plan of `world` processes needs of the launch options: nodes that
// split it, a store address across nodes, fault injection that can fire.
void CheckProcesses(const RunOptions& options, int world) {
  // Fault injection for a rank or step that never runs would never fire (step
  // `steps`: after the last step, before the final checkpoint).
  if (options.kill_rank >= world ||
      (options.kill_rank >= 0 && (options.kill_step < 0 || options.kill_step > options.steps))) {
    throw Error(
        fmt::format("--kill-rank {} --kill-step {}: the run has {} ranks and {} steps; valid: a rank in "
                    "0..{} and a step in 0..{}",
                    options.kill_rank, options.kill_step, world, options.steps, world - 1, options.steps));
  }
  if (world % options.nnodes != 0) {
    throw Error(fmt::format("the plan runs {} processes, which do not split over {} nodes", world, options.nnodes));
  }
  if (options.nnodes > 1 && options.port <= 0) {
    throw Error(
        "a run over several nodes needs the store's address on every node: --master ADDR:PORT (or "
        "MASTER_ADDR and MASTER_PORT)");
  }
}

// A model whose training state cannot fit this machine failed in the
// allocator inside every worker ("tried to allocate 4398046511104 bytes"),
// or met the OOM killer steps later: refuse it first. One replica's weights,
// gradients and AdamW state (ModelStateTotalBytes) is a lower bound of what a
// CPU run's processes hold on their nodes together; on CUDA it lives on GPUs.
void CheckHostMemory(const Model& model, const Workload& workload, const RunOptions& options) {
  if (options.device == Device::kCuda) return;
  const double pages = static_cast<double>(::sysconf(_SC_PHYS_PAGES));
  const double page_bytes = static_cast<double>(::sysconf(_SC_PAGE_SIZE));
  if (pages <= 0 || page_bytes <= 0) return;  // unknown: nothing to compare with
  const double ram_bytes = pages * page_bytes;
  const double state_bytes = ModelStateTotalBytes(model, workload.precision) / options.nnodes;
  if (state_bytes <= ram_bytes) return;
  throw Error(
      fmt::format("{}: model {} has {} parameters, whose weights, gradients and AdamW state in {} take at "
                  "least {}{}, more than this machine's {} of memory: a smaller model, or more machines",
                  model.source, model.name, ModelParams(model), PrecisionName(workload.precision),
                  HumanBytes(state_bytes), options.nnodes > 1 ? " a node" : "", HumanBytes(ram_bytes)));
}

RunResult RunWorkers(const Model& model, const Cluster& cluster, const Workload& workload, const Plan& plan,
                     const RunOptions& options, const std::vector<std::optional<IterationSchedule>>& schedules,
                     const Replanner& replanner) {
  CheckHostMemory(model, workload, options);
  if (options.fault_tolerant)
    return runtime::RunFaultTolerant(model, cluster, workload, plan, schedules, options, replanner);
  // Everything the runtime cannot run is an error before any process starts.
  const ExecutionPlan first = runtime::CompileForRuntime(model, cluster, workload, plan, DrawBatch(workload, 0),
                                                         schedules.empty() || !schedules[0] ? nullptr : &*schedules[0]);
  // One process per GPU of the groups the plan uses (runtime/process_layout.h).
  const runtime::ProcessLayout layout = runtime::LayoutProcesses(first);
  const int world = layout.processes;
  CheckProcesses(options, world);
  const int port = options.port > 0 ? options.port : FreePort();
  const int per_node = world / options.nnodes, first_rank = options.node_rank * per_node;
  RunOptions worker_options = options;
  worker_options.local_processes = per_node;
  if (options.device == Device::kCuda) {
    // NCCL pairs messages by order, not by tag.
    if (const std::string why = MessageOrderMismatch(first.schedule); !why.empty()) {
      throw Error(
          "--device cuda: the plan's messages between two ranks are not received in the order they are "
          "sent, which NCCL needs: " +
          why);
    }
    // Where a process merges several ranks' lists, a message fans out to several
    // processes of a group (sequence shares) or CP's ring exchanges blocks,
    // the order per pair of processes is not the schedule's per pair of ranks:
    // not checked for NCCL yet, so refused rather than left to hang until the timeout.
    // One process holds no NCCL messages at all (its ranks pass tensors in
    // memory): Mosaic's co-located modules on one GPU run.
    for (const auto& copies : layout.of_group) {
      if (copies.size() > 1 && world > 1) {
        throw Error(
            "--device cuda: this plan runs several ranks on one GPU (units taking turns: DistMM, Optimus; "
            "or sharing its SMs: Mosaic, whose green-context engine does not drive runs yet); "
            "their merged message order is not checked against NCCL's in-order matching yet; run it on "
            "--device cpu");
      }
    }
    for (const auto& st : first.stages) {
      if (st.seq_share > 1 || st.cp > 1) {
        throw Error(
            fmt::format("--device cuda: stage {} shares sequences or runs context parallelism; their "
                        "messages are not checked against NCCL's in-order matching yet; run it on --device "
                        "cpu",
                        st.label));
      }
    }
    // Counted without CUDA in this process (workers fork from it): the driver's device nodes.
    int gpus = 0;
    while (access(fmt::format("/dev/nvidia{}", gpus).c_str(), F_OK) == 0) ++gpus;
    if (gpus == 0) throw Error("--device cuda: this machine has no GPU (/dev/nvidia0 is absent)");
    if (gpus < per_node) {
      throw Error(
          fmt::format("--device cuda: the plan runs {} processes on this node but it has {} GPU(s); NCCL "
                      "cannot share a GPU between ranks (ncclInvalidUsage): use a plan of at most {} "
                      "GPU(s) per node",
                      per_node, gpus, gpus));
    }
  }
  std::vector<Child> children(world);
  runtime::LauncherSignals signals;  // SIGINT, SIGTERM, SIGHUP: passed on to the workers below
  const pid_t launcher = getpid();
  for (int r = first_rank; r < first_rank + per_node; ++r) {
    int fds[2];
    if (pipe(fds) != 0) throw Error(fmt::format("runtime: cannot create a pipe for rank {}", r));
    const pid_t pid = fork();
    if (pid < 0) throw Error(fmt::format("runtime: cannot start rank {}: {}", r, std::strerror(errno)));
    if (pid == 0) {
      runtime::DieWithParent(launcher);
      close(fds[0]);
      for (int q = first_rank; q < r; ++q) close(children[q].fd);
      runtime::WorkerSpec spec{&model, &cluster, &workload, &plan, &schedules, worker_options, r, world, port};
      _exit(runtime::RunWorker(spec, fds[1]));
    }
    close(fds[1]);
    children[r].pid = pid;
    children[r].fd = fds[0];
  }
  // Read every rank's reports; a rank silent for longer than the timeout fails the run.
  for (int r = 0; r < world; ++r) children[r].open = r >= first_rank && r < first_rank + per_node;
  auto last_heard = std::chrono::steady_clock::now();
  int open = per_node;
  bool timed_out = false;
  while (open > 0) {
    std::vector<pollfd> pfds;
    std::vector<int> who;
    for (int r = 0; r < world; ++r) {
      if (children[r].open) {
        pfds.push_back({children[r].fd, POLLIN, 0});
        who.push_back(r);
      }
    }
    const int ready = poll(pfds.data(), pfds.size(), 200);
    if (const int s = signals.Received()) {
      std::vector<pid_t> pids;
      for (int r = first_rank; r < first_rank + per_node; ++r) pids.push_back(children[r].pid);
      // With --checkpoint-dir the workers finish their step and save it first (runtime/launcher_signals.h).
      runtime::StopProcesses(pids, s, runtime::kSignalGrace_s);
      for (int r = 0; r < world; ++r) {
        if (!children[r].open) continue;
        // What the workers reported before they ended (their last steps' metrics) is recorded too.
        char buf[4096];
        ssize_t n;
        while ((n = read(children[r].fd, buf, sizeof(buf))) > 0) children[r].buffer.append(buf, n);
        TakeLines(children[r], options.on_step);
        close(children[r].fd);
      }
      std::string saved;
      if (!options.checkpoint_root.empty()) {
        try {
          const std::string at = weights::FindCheckpoint(options.checkpoint_root);
          saved = fmt::format("its latest checkpoint is {} (`--resume {}` goes on from there)", at,
                              options.checkpoint_root);
        } catch (const Error&) {  // none saved yet: said as before
        }
      }
      throw Interrupted(s, saved);
    }
    if (ready > 0) last_heard = std::chrono::steady_clock::now();
    for (size_t i = 0; i < pfds.size(); ++i) {
      if (!(pfds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Child& c = children[who[i]];
      char buf[4096];
      const ssize_t n = read(c.fd, buf, sizeof(buf));
      if (n <= 0) {
        c.open = false;
        close(c.fd);
        --open;
        continue;
      }
      c.buffer.append(buf, n);
      TakeLines(c, options.on_step);
    }
    const double silent_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - last_heard).count();
    if (silent_s > options.timeout_s + 10) {  // c10d's own timeout fires first; this is the backstop
      timed_out = true;
      break;
    }
  }
  std::vector<std::string> failures;
  std::set<std::string> errors;  // what the failed ranks said, once each
  bool all_said = true;          // every failed rank exited with an error of its own
  for (int r = first_rank; r < first_rank + per_node; ++r) {
    Child& c = children[r];
    if (timed_out && c.open) kill(c.pid, SIGKILL);
    int status = 0;
    waitpid(c.pid, &status, 0);
    std::string error;
    for (const auto& l : c.lines) {
      const runtime::WorkerMessage message = runtime::Decode(l);
      if (const auto* f = std::get_if<runtime::report::Failure>(&message)) error = f->text;
    }
    if (timed_out && c.open) {
      // Silent may be busy: a step of a large batch on a CPU reports nothing for minutes.
      failures.push_back(
          fmt::format("rank {} (pid {}) was silent for over {:.0f} s and was stopped (--timeout {:g}: "
                      "a step that long needs a larger --timeout, or a smaller batch)",
                      r, c.pid, options.timeout_s + 10, options.timeout_s));
    } else if (WIFSIGNALED(status) || WEXITSTATUS(status) != 0) {
      // Process 0 serves the run's store (runtime/c10d_calls.h): when a
      // signal ended it, the others' errors (a broken pipe) follow from that.
      const bool store_gone = r == 0 && WIFSIGNALED(status) && world > 1;
      all_said = all_said && !WIFSIGNALED(status) && !error.empty();
      errors.insert(error);
      failures.push_back(
          fmt::format("rank {} (pid {}) {}{}{}", r, c.pid, runtime::DescribeExit(status),
                      error.empty() || WIFSIGNALED(status) ? "" : ": " + error,
                      store_gone ? " (it served the run's store; the errors below follow from it)" : ""));
    }
  }
  // Every rank stopping with the same words (a diverged step, which all of
  // them see through the norm's all-reduce) is said once.
  if (!failures.empty() && all_said && errors.size() == 1 && failures.size() == static_cast<size_t>(per_node)) {
    throw Error(fmt::format("run failed: {} (every process)", *errors.begin()));
  }
  if (!failures.empty()) {
    std::string msg = "run failed:";
    for (const auto& f : failures) msg += "\n  - " + f;
    throw Error(msg);
  }
  std::vector<std::vector<std::string>> lines(world);
  for (int r = 0; r < world; ++r) lines[r] = std::move(children[r].lines);
  RunResult out;
  runtime::ReadReports(lines, layout, options.steps, out);
  if (!options.resume_checkpoint.empty()) {
    out.first_step = weights::RunCheckpointReader(options.resume_checkpoint).manifest().steps_done;
  }
  return out;
}

}  // namespace

}  // namespace loom
