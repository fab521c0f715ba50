#include "loom/runtime/worker.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "loom/data/sample_source.h"
#include "loom/error.h"
#include "loom/pipeline/validate.h"
#include "loom/plan/plan_json.h"
#include "loom/runtime/batch_loader.h"
#include "loom/runtime/c10d_calls.h"
#include "loom/runtime/fault_tolerance.h"
#include "loom/runtime/hf_save.h"
#include "loom/runtime/kernel_trace.h"
#include "loom/runtime/launcher_signals.h"
#include "loom/runtime/process_groups.h"
#include "loom/runtime/runnable_plan.h"
#include "loom/runtime/step_executor.h"
#include "loom/runtime/tensor_memory.h"
#include "loom/runtime/torch_model.h"
#include "loom/runtime/training_state.h"
#include "loom/runtime/worker_reports.h"
#include "loom/spec/model_identity.h"
#include "loom/weights/run_checkpoint.h"

namespace loom::runtime {

namespace {

// One generation of a fault-tolerant run's worker (runtime/fault_tolerance.h):
// the plan it runs from `first_step`, and what carries over to the next.
struct Generation {
  WorkerControl* control = nullptr;
  c10::intrusive_ptr<c10d::Store> store;  // the run's store (its own process serves it)
  int id = 0;
  int first_step = 0;
  // Where the generation starts: every worker restores `restore_from` (a
  // checkpoint folder; "": the initial state), or the survivors hand over
  // their whole layers (`carry`) and the others receive them.
  bool restore = true;
  std::string restore_from;
  // Whether this generation's plan keeps whole layers in every process
  // (runnable_plan.h WhyNoWholeLayers): only then does it snapshot each step
  // and carry its state into the next generation.
  bool whole_layers = false;
  // In: what this worker holds as of first_step (empty in generation 0). Out,
  // after an abort: what it holds as of the step the launcher's command names.
  TrainingState carry;
  // Every group this worker made: an aborted generation's groups are never
  // destroyed (their threads may still wait on a dead peer until c10d's
  // timeout; a destructor would wait with them).
  std::vector<Group> keep_alive;
  std::chrono::steady_clock::time_point commanded = std::chrono::steady_clock::now();
};

// Thrown out of a generation whose launcher sent its next command.
struct Reconfigure {};

// Where a fault-tolerant worker is in its generation: what it can hand on if
// the launcher's command interrupts it.
struct Progress {
  TrainingState snapshot;  // as of the start of step snapshot_step
  int snapshot_step = -1;
  int completed = 0;      // steps done
  bool restored = false;  // the generation's starting state is loaded
};

// Per step, the strategy's schedule of that step's batch (null: the plan's own compile).
const IterationSchedule* ScheduleOf(const WorkerSpec& spec, int step) {
  if (spec.schedules == nullptr || step >= static_cast<int>(spec.schedules->size())) return nullptr;
  const auto& s = (*spec.schedules)[step];
  return s ? &*s : nullptr;
}

// Step `step`'s batch compiled; a later step's batch must place stages as
// step 0's did (the executor's stages and groups are built once).
ExecutionPlan CompileStep(const WorkerSpec& spec, const ExecutionPlan& before, const Batch& batch, int step,
                          bool cuda) {
  ExecutionPlan next =
      CompileForRuntime(*spec.model, *spec.cluster, *spec.workload, *spec.plan, batch, ScheduleOf(spec, step));
  if (next.stages.size() != before.stages.size() || next.schedule.stage_rank != before.schedule.stage_rank) {
    throw Error(fmt::format("step {}: the batch's schedule places stages differently from step 0's", step));
  }
  for (size_t v = 0; v < next.stages.size(); ++v) {
    if (next.stages[v].layers != before.stages[v].layers) {
      throw Error(fmt::format("step {}: stage {} holds other layers than in step 0", step, v));
    }
  }
  if (const std::string why = MessageOrderMismatch(next.schedule); cuda && !why.empty()) {
    throw Error(fmt::format("step {}: NCCL needs messages received in the order they are sent: {}", step, why));
  }
  return next;
}

// A generation starts from the initial state or a checkpoint (generation 0,
// `loom run --resume`, or a recovery that restores the last checkpoint), or
// from what each worker held, the layers it lacks received from a surviving
// holder (Oobleck §2.5's copy).
void RestoreGeneration(Generation& gen, StepExecutor& executor, AbortFlag abort, const WorkerReports& reports,
                       const Model& model) {
  int64_t received = 0;
  if (gen.restore) {
    try {
      if (!gen.restore_from.empty()) executor.RestoreCheckpoint(weights::RunCheckpointReader(gen.restore_from));
    } catch (const Error& e) {
      throw OwnFailure(e.what());
    }
  } else {
    std::map<std::string, torch::Tensor> needed;
    for (auto& [name, p, o] : executor.Trainable()) needed[name] = p;
    received = ExchangeState(executor.world(), model, gen.carry, needed, abort);
    for (auto& [name, p, o] : executor.Trainable()) RestoreParam(name, p, *o, gen.carry.at(name));
  }
  gen.carry.clear();
  reports.Now(report::Ready{
      gen.id, std::chrono::duration<double>(std::chrono::steady_clock::now() - gen.commanded).count(), received});
}

// A fault-tolerant step ends in lockstep: the next starts once every worker
// finished this one. Its lines are reported once it commits; then the
// periodic checkpoint, if one is due. Throws Aborted when a command
// interrupts.
void CommitStep(const WorkerSpec& spec, Generation& gen, StepExecutor& executor, const ExecutionPlan& exec,
                WorkerReports& reports, int step) {
  const std::vector<WorkerMessage> held = reports.TakeStep();
  reports.Now(report::Done{gen.id, step});
  if (!gen.control->WaitReleased(step + 1)) {
    // A command that resumes after this step: it committed (a node joins).
    const std::optional<ControlCommand> command = gen.control->Pending();
    if (command && command->kind != ControlCommand::Kind::kExit && command->step == step + 1) {
      for (const auto& m : held) reports.Now(m);
    }
    throw Aborted();
  }
  for (const auto& m : held) reports.Now(m);
  // A checkpoint of the state after this step, before the next starts: this
  // worker's part, into the staging folder the launcher commits.
  if (const std::string dir = gen.control->CheckpointBefore(step + 1); !dir.empty()) {
    executor.SaveCheckpointPart(exec, dir + "/" + weights::PartFileName(spec.rank));
    report::Saved saved{gen.id, step + 1};
    if (const LossScaler* scaler = executor.loss_scaler()) {
      saved.has_loss_scale = true;
      saved.loss_scale = scaler->scale();
      saved.growth_tracker = scaler->growth_tracker();
      saved.hysteresis_tracker = scaler->hysteresis_tracker();
    }
    reports.Now(saved);
  }
}

// A fault-tolerant generation interrupted by `e`: hands the state as of the
// launcher's command's step to the next generation (throws Reconfigure), or
// rethrows when there is no command.
[[noreturn]] void HandOver(const WorkerSpec& spec, Generation& gen, StepExecutor* executor, Progress& progress,
                           const std::exception& e) {
  if (dynamic_cast<const OwnFailure*>(&e) != nullptr) throw;  // every process ends alike, at once
  // A dead peer makes c10d fail here, often before the launcher's command
  // arrives: wait for it (the launcher notices within its heartbeat timeout).
  if (dynamic_cast<const Aborted*>(&e) == nullptr) {
    const auto until =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(spec.options.heartbeat_timeout_s + 5);
    while (!gen.control->abort && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (!gen.control->abort) throw;
  }
  const std::optional<ControlCommand> command = gen.control->Pending();
  if (!command || command->kind == ControlCommand::Kind::kExit) throw Error("runtime: the launcher is gone");
  if (!progress.restored || executor == nullptr) throw Reconfigure{};  // gen.carry is still the state as of first_step
  // The next generation restores a checkpoint: nothing to carry.
  if (!gen.whole_layers || (command->kind == ControlCommand::Kind::kGeneration && command->restore)) {
    gen.carry.clear();
    throw Reconfigure{};
  }
  // The state as of the command's step: the live one if this worker finished
  // every step before it, else the snapshot its step began with.
  const int c = command->step;
  if (progress.completed == c) {
    gen.carry = executor->CaptureLive();
  } else if (progress.snapshot_step == c) {
    gen.carry = std::move(progress.snapshot);
  } else {
    throw Error(
        fmt::format("runtime: the launcher resumes from step {}, but this worker finished {} step(s) and "
                    "holds a snapshot of step {}",
                    c, progress.completed, progress.snapshot_step));
  }
  throw Reconfigure{};
}

// Fault injection (--kill): SIGKILL, or SIGSTOP for a hang, once the step has
// run `after_actions` actions; at the step's end (`at_end`), any count past
// its actions (after everything, before it commits).
void MaybeDie(const WorkerSpec& spec, const WorkerReports& reports, int step, int actions_run, bool at_end) {
  for (const auto& k : spec.options.kills) {
    if (k.process != spec.birth || k.step != step) continue;
    if (at_end ? k.after_actions < actions_run : k.after_actions != actions_run) continue;
    reports.Now(report::Dying{
        step, std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count()});
    raise(k.hang ? SIGSTOP : SIGKILL);
  }
}

// What the launcher compares with the simulator, once every step ran.
void ReportMemory(const WorkerReports& reports, bool cuda, int device, double weight_bytes,
                  const TensorMemoryCounter& tensor_memory) {
  // Peak resident memory of this process (CPU: the allocator's high-water mark
  // is the RSS peak; ru_maxrss is in KiB on Linux); on a GPU the caching
  // allocator's peak of allocated bytes instead.
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  reports.Now(
      report::PeakMemory{cuda ? CudaPeakAllocatedBytes(device) : static_cast<double>(usage.ru_maxrss) * 1024.0});
  // The weights are held before the counter starts: added to its peak so it
  // compares with the simulator's.
  reports.Now(report::PeakTensorMemory{weight_bytes + static_cast<double>(tensor_memory.peak_bytes())});
}

// The torch dtype of a checkpoint's config.json name (runtime/hf_save.h PrepareSave checked it).
torch::ScalarType SaveDType(const std::string& name) {
  if (name == "bfloat16") return torch::kBFloat16;
  if (name == "float16") return torch::kHalf;
  return torch::kFloat;
}

// --checkpoint-dir: whether the state after step `step` is saved.
bool SavesAfter(const RunOptions& o, int step) {
  if (o.checkpoint_root.empty()) return false;
  return step + 1 == o.steps || (o.checkpoint_every > 0 && (step + 1) % o.checkpoint_every == 0);
}

// A training checkpoint of the state after `steps_done` steps
// (weights/run_checkpoint.h): process 0 makes the staging folder, every
// process writes its part, and once all are written process 0 commits it
// with the manifest. Two barriers over the whole run.
void SaveCheckpoint(const WorkerSpec& spec, StepExecutor& executor, const ExecutionPlan& exec, int steps_done,
                    const WorkerReports& reports) {
  const auto start = std::chrono::steady_clock::now();
  const std::string& root = spec.options.checkpoint_root;
  if (spec.rank == 0) weights::StageRunCheckpoint(root, steps_done);
  executor.Barrier();
  const std::string staging = weights::StagingPath(root, steps_done);
  executor.SaveCheckpointPart(exec, staging + "/" + weights::PartFileName(spec.rank));
  // Fault injection (tests): --kill-rank dies in the save before step --kill-step, its part written.
  if (spec.rank == spec.options.kill_rank && steps_done == spec.options.kill_step) _exit(17);
  executor.Barrier();
  if (spec.rank != 0) return;
  weights::RunCheckpointManifest m;
  m.steps_done = steps_done;
  m.model = spec.model->name;
  m.seed = spec.workload->seed;
  m.global_batch = spec.workload->global_batch;
  m.plan = spec.options.plan_label;
  m.model_identity = ModelIdentity(*spec.model);
  m.data_stream = spec.options.data_stream;
  for (int r = 0; r < spec.world; ++r) m.parts.push_back(weights::PartFileName(r));
  if (const LossScaler* s = executor.loss_scaler()) {
    m.has_loss_scale = true;
    m.loss_scale = s->scale();
    m.growth_tracker = s->growth_tracker();
    m.hysteresis_tracker = s->hysteresis_tracker();
  }
  weights::CommitRunCheckpoint(staging, root, m, spec.options.keep_checkpoints);
  reports.Now(
      report::Note{fmt::format("checkpoint {}/{} written in {:.3f} s", root, weights::StepFolderName(steps_done),
                               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count())});
}

// `--resume D` of a training checkpoint: the steps it holds (0: none).
int ResumedSteps(const WorkerSpec& spec) {
  if (spec.options.resume_checkpoint.empty()) return 0;
  return weights::RunCheckpointReader(spec.options.resume_checkpoint).manifest().steps_done;
}

// Runs steps first_step.. of spec's plan. `gen`: a fault-tolerant run's
// generation (null otherwise); throws Reconfigure when its launcher sent a
// gen or stop command, with gen->carry set to the state as of that command's step.
void RunGeneration(const WorkerSpec& spec, int fd, Generation* gen) {
  SetComputeThreads(std::max(1, spec.options.threads_per_rank));
  const int first_step = gen ? gen->first_step : ResumedSteps(spec);
  // The workload's source, made once; the first step's batch now (it builds
  // the stages), every later one by the loader, a step ahead.
  std::unique_ptr<SampleSource> source = WorkloadSource(*spec.workload);
  const auto drawn = std::chrono::steady_clock::now();
  Batch batch = source->Draw(spec.workload->global_batch, spec.workload->seed, first_step);
  ExecutionPlan exec =
      CompileForRuntime(*spec.model, *spec.cluster, *spec.workload, *spec.plan, batch, ScheduleOf(spec, first_step));
  ReadSamples(batch, LocalSamples(exec, PlaceProcess(exec, spec.rank)));
  double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - drawn).count(), wait_s = 0;
  const bool cuda_plan = spec.options.device == Device::kCuda;
  BatchLoader loader(
      std::move(source), spec.workload->global_batch, spec.workload->seed, first_step + 1, spec.options.steps,
      [&spec, first = exec, cuda_plan](int step, const Batch& b) {
        return CompileStep(spec, first, b, step, cuda_plan);
      },
      spec.rank);
  // A fault-tolerant run's generations rendezvous under their own prefix of
  // the run's store; an aborted generation's keys are never read again.
  const c10::intrusive_ptr<c10d::Store> store =
      gen ? c10::intrusive_ptr<c10d::Store>(
                c10::make_intrusive<c10d::PrefixStore>(fmt::format("g{}/", gen->id), gen->store))
          : MakeStore(spec.options.master_addr, spec.rank, spec.world, spec.port, spec.options.timeout_s, false,
                      /*other_machines=*/spec.options.nnodes > 1);
  const AbortFlag abort = gen ? gen->control : nullptr;
  // CUDA: one GPU per process of this node, NCCL groups; else host tensors and Gloo.
  const bool cuda = spec.options.device == Device::kCuda;
  const torch::Device device =
      cuda ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(spec.rank % spec.options.local_processes))
           : torch::Device(torch::kCPU);
  const GroupMaker maker(store, spec.options.timeout_s, spec.options.host, cuda, abort,
                         gen ? &gen->keep_alive : nullptr);
  WorkerReports reports(fd, /*hold_steps=*/gen != nullptr);
  ExecutorOptions options;
  options.seed = spec.workload->seed;
  options.training = spec.options.training;
  options.steps = spec.options.steps;
  // Each node's launcher shows the run's progress from its first process.
  options.reports_metrics = spec.rank % spec.options.local_processes == 0;
  options.sm_quotas = spec.options.sm_quotas;
  options.weights_dir = spec.options.weights_dir;
  // The workload's precision: bf16 mixed precision, fp16 mixed precision with
  // loss scaling, or fp32; tf32 is fp32 with TF32 matmuls on a GPU (a CPU has none).
  options.compute_dtype = ComputeDtype(spec.workload->precision);
  if (spec.workload->precision == Precision::kFp16) options.loss_scale = spec.options.loss_scale;
  if (cuda)
    at::globalContext().setFloat32MatmulPrecision(spec.workload->precision == Precision::kTf32 ? "high" : "highest");
  // Heterogeneous pipeline templates (Oobleck): stage boundaries differ
  // between templates, so gradients are summed per layer segment.
  options.layerwise = spec.plan->units[0].pipelines.size() > 1;
  StepExecutor executor(*spec.model, exec, spec.rank, spec.world, device, maker, abort, options, reports);
  // --checkpoint-dir: a signal asks for a checkpoint and a stop after the step, not an end at once.
  std::optional<LauncherSignals> stop_signals;
  if (!gen && !spec.options.checkpoint_root.empty()) stop_signals.emplace(/*restart_calls=*/true);
  Progress progress;
  progress.completed = first_step;
  progress.restored = gen == nullptr;
  // Tensors the steps allocate (activations, gradients, optimizer state), counted exactly.
  std::unique_ptr<TensorMemoryCounter> tensor_memory;
  try {
    if (gen) {
      gen->whole_layers = WhyNoWholeLayers(*spec.model, *spec.plan, spec.workload->precision).empty();
      RestoreGeneration(*gen, executor, abort, reports, *spec.model);
      progress.restored = true;
    } else if (!spec.options.resume_checkpoint.empty()) {  // `--resume D`
      executor.RestoreCheckpoint(weights::RunCheckpointReader(spec.options.resume_checkpoint));
    }
    tensor_memory = std::make_unique<TensorMemoryCounter>();
    for (int step = first_step; step < spec.options.steps; ++step) {
      if (spec.rank == spec.options.kill_rank && step == spec.options.kill_step) _exit(17);  // fault injection
      // Fault-tolerant: the state the step starts from, should it be replayed.
      if (gen && gen->whole_layers) {
        progress.snapshot = executor.CaptureLive();
        progress.snapshot_step = step;
      }
      // Drawing and compiling the step's batch is the loader's and planner's
      // work: done before the step's clock starts.
      if (step > first_step) {
        Loaded next = loader.Next();
        batch = std::move(next.batch);
        exec = std::move(next.exec);
        load_s = next.load_s;
        wait_s = next.wait_s;
      }
      executor.SetDataTimes(wait_s, load_s);
      // --kernel-trace: the last step, each operator and kernel it ran.
      // PyTorch's profiler takes the slot the tensor counter reports through:
      // the traced step's bytes go uncounted (the launcher asks for 2 steps).
      std::optional<KernelTrace> kernel_trace;
      if (!spec.options.kernel_trace_dir.empty() && step + 1 == spec.options.steps) {
        if (step == first_step) {  // resumed (or a generation started) at the last step: nothing else would count
          reports.Now(report::Note{fmt::format(
              "--kernel-trace: step {} is the only step this run trains, and a traced step's tensor memory goes "
              "uncounted; no trace written (give --steps at least 2 past the checkpoint)",
              step)});
        } else {
          tensor_memory->Pause();
          kernel_trace.emplace(cuda);
        }
      }
      int actions_run = 0;
      const bool stop = executor.RunStep(
          step, exec, batch, step + 1 == spec.options.steps,
          [&] {
            if (gen) MaybeDie(spec, reports, step, actions_run, false);
            ++actions_run;
          },
          stop_signals && stop_signals->Received() != 0);
      if (kernel_trace) {
        kernel_trace->Save(KernelTracePath(spec.options.kernel_trace_dir, spec.rank));
        kernel_trace.reset();
        tensor_memory->Resume();
      }
      if (!gen && SavesAfter(spec.options, step)) SaveCheckpoint(spec, executor, exec, step + 1, reports);
      if (stop) {  // a signal: every process stops after this step, its state saved
        if (!SavesAfter(spec.options, step)) SaveCheckpoint(spec, executor, exec, step + 1, reports);
        reports.Now(report::Note{fmt::format("stopped by a signal after step {}", step)});
        break;
      }
      if (gen) {
        MaybeDie(spec, reports, step, actions_run, true);
        progress.completed = step + 1;
        CommitStep(spec, *gen, executor, exec, reports, step);
      }
    }
  } catch (const std::exception& e) {
    if (!gen) throw;
    HandOver(spec, *gen, &executor, progress, e);
  }
  ReportMemory(reports, cuda, device.index(), executor.WeightBytes(), *tensor_memory);
  executor.ReportWeights(exec);
  if (!spec.options.save_dir.empty()) {
    executor.SaveHfPart(exec, SavePartPath(spec.options.save_dir, spec.rank), SaveDType(spec.options.save_dtype));
  }
}

// A fault-tolerant run's worker: generation after generation, as its
// launcher commands (runtime/fault_tolerance.h).
int RunGenerations(const WorkerSpec& first, int fd) {
  signal(SIGPIPE, SIG_IGN);  // a dead peer's socket fails the write, not this process
  WorkerControl control(first.control_fd, fd, first.options.heartbeat_s);
  Generation gen;
  gen.control = &control;
  gen.store = MakeStore(first.options.master_addr, 0, 0, first.port, first.options.timeout_s, /*client_only=*/true);
  gen.id = first.generation;
  gen.first_step = first.first_step;
  gen.restore = first.restores;
  gen.restore_from = first.options.resume_checkpoint;
  WorkerSpec spec = first;
  Plan plan = *first.plan;
  Cluster cluster = *first.cluster;
  spec.plan = &plan;
  spec.cluster = &cluster;
  while (true) {
    try {
      RunGeneration(spec, fd, &gen);
      return 0;
    } catch (const Reconfigure&) {
    } catch (const std::exception&) {
      if (!control.abort) throw;  // setup failed under a command: the carry is unchanged
    }
    const ControlCommand c = control.TakePending();
    if (c.kind == ControlCommand::Kind::kExit) return 4;
    if (c.kind == ControlCommand::Kind::kStop) {
      WriteStatePart(c.path + "/" + weights::PartFileName(spec.rank), gen.carry);
      WriteLine(fd, Encode(report::Stopped{c.step}));
      return 0;
    }
    gen.commanded = std::chrono::steady_clock::now();
    gen.id = c.generation;
    gen.first_step = c.step;
    gen.restore = c.restore;
    gen.restore_from = c.restore_from;
    spec.schedules = nullptr;  // a re-planned generation runs its plan's own compile
    plan = LoadPlan(c.path);
    cluster.nodes = c.nodes;
    spec.rank = c.rank;
    spec.world = c.world;
  }
}

}  // namespace

int RunWorker(const WorkerSpec& spec, int fd) {
  try {
    if (spec.control_fd >= 0) return RunGenerations(spec, fd);
    RunGeneration(spec, fd, nullptr);
    return 0;
  } catch (const c10::Error& e) {  // libtorch's words without its stack trace
    WriteLine(fd, Encode(report::Failure{e.what_without_backtrace()}));
    return 3;
  } catch (const std::exception& e) {
    WriteLine(fd, Encode(report::Failure{e.what()}));
    return 3;
  } catch (const Reconfigure&) {
    WriteLine(fd, Encode(report::Failure{"runtime: a reconfiguration outside a fault-tolerant run"}));
    return 3;
  }
}

}  // namespace loom::runtime
