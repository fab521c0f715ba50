#include "loom/runtime/worker.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include "loom/data/sample_source.h"
#include "loom/error.h"
#include "loom/cost/layer_pricing.h"
#include "loom/plan/compile_plan.h"
#include "loom/runtime/c10d_compat.h"
#include "loom/runtime/torch_model.h"

namespace loom::runtime {

namespace {

void Report(int fd, const std::string& line) {
  const std::string text = line + "\n";
  ssize_t off = 0;
  while (off < static_cast<ssize_t>(text.size())) {
    const ssize_t n = write(fd, text.data() + off, text.size() - off);
    if (n <= 0) return;
    off += n;
  }
}

std::vector<int> SamplesOf(const MicrobatchWork& mb) {  // whole samples only (the text workload)
  std::vector<int> out;
  for (const auto& p : mb.pieces) out.push_back(p.sample);
  return out;
}

// A message's tag: unique per (payload, producer stage, consumer stage, producer microbatch).
int Tag(Payload payload, int from, int to, int mb, int stages, int microbatches) {
  return ((static_cast<int>(payload) * stages + from) * stages + to) * microbatches + mb;
}

// Whether microbatch k of stage v (in replica r) recomputes any layer fully.
bool RecomputesFully(const ExecutionPlan& e, int r, int v, int k) {
  const auto& per_layer = e.replicas[r][v][k].layer_recompute;
  if (per_layer.empty()) return e.stages[v].recompute == Recompute::kFull;
  return std::find(per_layer.begin(), per_layer.end(), Recompute::kFull) != per_layer.end();
}

}  // namespace

ExecutionPlan CompileForRuntime(const Model& model, const Cluster& cluster, const Workload& workload,
                                const Plan& plan, const Batch& batch) {
  if (plan.units.size() != 1 || plan.units[0].pipelines.size() != 1) {
    throw Error("runtime: the plan has several units or pipeline templates; the runtime runs one unit with one "
                "template so far (Megatron-LM layouts)");
  }
  const Unit& u = plan.units[0];
  if (u.cp != 1 || plan.group_gpus != u.tp) {
    throw Error(fmt::format("runtime: context parallelism or sequence sharing in a group (tp {}, cp {}, group of {} "
                            "GPUs) is not run yet; use cp 1 and groups of tp GPUs",
                            u.tp, u.cp, plan.group_gpus));
  }
  for (const auto& name : u.modules) {
    if (!SplitsOverTensorParallel(model.modules[model.FindModule(name)], u.tp)) {
      throw Error(fmt::format("runtime: module {} does not split over tp {} (its heads do not divide); replicating it "
                              "inside the TP group is not run yet",
                              name, u.tp));
    }
  }
  if (workload.source.kind != "text") {
    throw Error(fmt::format("runtime: workload '{}' ({} samples); the runtime feeds text samples so far",
                            workload.name, workload.source.kind));
  }
  ExecutionPlan exec = CompilePlan(model, cluster, workload, plan, batch);
  for (const auto& st : exec.stages) CheckRunnable(model, st.layers);
  return exec;
}

int RunWorker(const WorkerSpec& spec, int fd) {
  try {
    const Model& model = *spec.model;
    Batch batch = DrawBatch(*spec.workload, 0);
    ExecutionPlan exec = CompileForRuntime(model, *spec.cluster, *spec.workload, *spec.plan, batch);
    // Process g runs TP shard g % T of pipeline rank (g / T) % P of data-parallel
    // replica g / (T P) (Megatron's order: TP fastest, then PP, then DP).
    const int P = exec.schedule.num_ranks, D = static_cast<int>(exec.replicas.size());
    const int T = spec.plan->units[0].tp;
    const int shard = spec.rank % T, me = (spec.rank / T) % P, replica = spec.rank / (T * P);
    auto global_of = [&](int pp_rank) { return (replica * P + pp_rank) * T + shard; };
    const std::string& host = spec.options.host;
    auto store = MakeStore(spec.options.master_addr, spec.rank, spec.world, spec.port, spec.options.timeout_s);
    auto pg = MakeGlooGroup(store, "world", spec.rank, spec.world, spec.options.timeout_s, host);
    // This shard's copies in every replica: they hold the same weights and sync their gradients.
    GlooGroup dp, tp;
    if (D > 1) dp = MakeGlooGroup(store, fmt::format("dp{}.{}", me, shard), replica, D, spec.options.timeout_s, host);
    TensorParallel tensor_parallel;
    if (T > 1) {
      tp = MakeGlooGroup(store, fmt::format("tp{}.{}", replica, me), shard, T, spec.options.timeout_s, host);
      tensor_parallel = {shard, T, [tp](torch::Tensor& t) { AllReduceSum(*tp, t); }};
    }
    // This rank's stages, built from the same per-layer seeds as any other rank's copy.
    std::map<int, LayerStack> stages;
    std::vector<torch::Tensor> params;
    for (int v = 0; v < exec.schedule.num_stages(); ++v) {
      if (exec.schedule.stage_rank[v] != me) continue;
      stages.emplace(v, LayerStack(model, exec.stages[v].layers, spec.workload->seed, tensor_parallel));
      for (auto& p : stages.at(v)->parameters()) {
        if (p.requires_grad()) params.push_back(p);  // frozen layers get no optimizer state
      }
    }
    int64_t vocab = 0;
    for (const auto& m : model.modules) {
      for (const auto& l : m.layers) {
        if (l.kind == LayerKind::kLmHead) vocab = l.vocab;
      }
    }
    // A rank whose layers are all frozen has nothing to update.
    std::unique_ptr<torch::optim::AdamW> opt;
    if (!params.empty()) {
      opt = std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(spec.options.learning_rate));
    }
    for (int step = 0; step < spec.options.steps; ++step) {
      if (spec.rank == spec.options.kill_rank && step == spec.options.kill_step) _exit(17);  // fault injection
      std::set<int> synced;  // stages whose gradients this step's collectives reduced
      // Drawing and compiling the step's batch is the loader's and planner's work:
      // done once, before the step's clock starts.
      if (step > 0) {
        batch = DrawBatch(*spec.workload, step);
        exec = CompileForRuntime(model, *spec.cluster, *spec.workload, *spec.plan, batch);
      }
      const auto t0 = std::chrono::steady_clock::now();
      const Schedule& sch = exec.schedule;
      const int S = sch.num_stages(), M = sch.num_microbatches;
      const int last = S - 1;
      std::map<std::pair<int, int>, torch::Tensor> input, output, grad_out, recomputed;  // (stage, mb)
      double loss_sum = 0;
      // Sends in flight (the communication stream): their buffers live until the wait.
      std::vector<std::pair<WorkHandle, std::vector<at::Tensor>>> sending;
      const bool last_step = step + 1 == spec.options.steps;
      for (size_t index = 0; index < sch.ranks[me].size(); ++index) {
        const Action& a = sch.ranks[me][index];
        const int v = a.stage, k = a.microbatch;
        const double began_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        switch (a.kind) {
          case ActionKind::kForward: {
            torch::Tensor x;
            if (v == 0) {
              x = TokenIds(batch, SamplesOf(exec.replicas[replica][v][k]), step, vocab, false);
            } else {
              auto local = output.find({v - 1, k});  // the producer on this rank (interleaved): cut the graph here too
              x = local != output.end() ? local->second.detach().requires_grad_(true) : input.at({v, k});
              input[{v, k}] = x;
            }
            // Full recomputation (activation checkpointing): keep only the
            // stage's input; the backward re-runs the forward. Decided per stage
            // from its layers' choices for this microbatch (any `full` layer
            // recomputes the stage: the same numbers, more memory than Loom's
            // per-layer model assumes).
            const bool recompute = RecomputesFully(exec, replica, v, k);
            torch::Tensor y;
            if (recompute && v != last) {
              torch::NoGradGuard no_grad;
              y = stages.at(v)->forward(x);
              recomputed[{v, k}] = x;
            } else {
              y = stages.at(v)->forward(x);
            }
            if (v == last) {
              const auto targets = TokenIds(batch, SamplesOf(exec.replicas[replica][v][k]), step, vocab, true);
              y = torch::nn::functional::cross_entropy(y.reshape({-1, y.size(-1)}), targets.reshape({-1})) / M;
              loss_sum += y.item<double>();
            }
            output[{v, k}] = y;
            break;
          }
          case ActionKind::kBackward:
          case ActionKind::kBackwardData: {
            // ZB-H1's split: the weight gradient is computed here with the data gradient for now.
            if (auto again = recomputed.find({v, k}); again != recomputed.end()) {
              output[{v, k}] = stages.at(v)->forward(again->second);  // the recomputation
              recomputed.erase(again);
            }
            torch::Tensor& y = output.at({v, k});
            if (!y.requires_grad()) break;  // frozen layers fed by nothing trainable: no backward at all
            if (v == last) {
              y.backward();
            } else {
              auto local = input.find({v + 1, k});
              const torch::Tensor g = local != input.end() && sch.stage_rank[v + 1] == me
                                          ? local->second.grad()
                                          : grad_out.at({v, k});
              y.backward(g);
            }
            break;
          }
          case ActionKind::kBackwardWeight:
            break;
          case ActionKind::kSend: {
            const bool act = a.payload == Payload::kActivation;
            const int to = a.peer_stage >= 0 ? a.peer_stage : (act ? v + 1 : v - 1);
            torch::Tensor t = act ? output.at({v, k}).detach() : input.at({v, k}).grad();
            if (!t.defined()) t = torch::zeros_like(input.at({v, k}));  // nothing trainable upstream needs it
            const int tag = act ? Tag(a.payload, v, to, k, S, M) : Tag(a.payload, to, v, k, S, M);
            sending.emplace_back(WorkHandle(), std::vector<at::Tensor>{t.contiguous()});
            sending.back().first = SendAsync(*pg, sending.back().second, global_of(a.peer), tag);
            break;
          }
          case ActionKind::kRecv: {
            const bool act = a.payload == Payload::kActivation;
            const int mine = a.peer_stage >= 0 ? a.peer_stage : (act ? v + 1 : v - 1);
            // Shapes follow from the microbatch: [samples, tokens, hidden] of the
            // producer's last layer (the samples have equal lengths: TokenIds checked
            // them at the first stage's forward).
            const auto& pieces = exec.replicas[replica][act ? mine : v][k].pieces;
            int64_t seq = 0;
            for (int64_t tokens : batch.samples[pieces.front().sample].doc_text_tokens) seq += tokens;
            const auto& range = exec.stages[act ? v : mine].layers.back();
            const int64_t hidden =
                model.modules[model.FindModule(range.module)].layers[range.end - 1].hidden;
            torch::Tensor t = torch::empty({static_cast<int64_t>(pieces.size()), seq, hidden});
            const int tag = act ? Tag(a.payload, v, mine, k, S, M) : Tag(a.payload, mine, v, k, S, M);
            Recv(*pg, t, global_of(a.peer), tag);
            if (act) {
              input[{mine, k}] = t.requires_grad_(true);
            } else {
              grad_out[{mine, k}] = t;
            }
            break;
          }
          case ActionKind::kCollective: {
            // The stage's gradients averaged over its data-parallel group: each
            // replica's loss is its slice's mean over M microbatches, and the
            // slices are equal, so the mean of replicas is the global batch's.
            // One all-reduce per stage, at its first bucket (the buckets are the
            // simulator's overlap model; here they run back to back anyway).
            if (D < 2 || !synced.insert(v).second) break;
            std::vector<torch::Tensor> grads;
            for (auto& p : stages.at(v)->parameters()) {
              grads.push_back(p.grad().defined() ? p.grad() : torch::zeros_like(p));
            }
            torch::Tensor flat = torch::cat([&] {
              std::vector<torch::Tensor> views;
              for (auto& g : grads) views.push_back(g.reshape({-1}));
              return views;
            }());
            AllReduceSum(*dp, flat);
            flat.div_(D);
            int64_t off = 0;
            for (auto& p : stages.at(v)->parameters()) {
              const int64_t n = p.numel();
              if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
              p.mutable_grad().copy_(flat.slice(0, off, off + n).view_as(p));
              off += n;
            }
            break;
          }
          case ActionKind::kWait:
            for (auto& [work, buffers] : sending) work->wait();
            sending.clear();
            break;
          case ActionKind::kOptimizerStep:
            if (opt) {
              opt->step();
              opt->zero_grad();
            }
            break;
        }
        // What ran, for the trace: the simulator's recorded kinds (compute, the
        // communication stream, the optimizer step; sends are asynchronous: their issue).
        if (last_step && shard == 0 &&
            (a.is_compute() || a.on_comm_stream() || a.kind == ActionKind::kOptimizerStep)) {
          const double ended_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          Report(fd, fmt::format("iv {} {} {:.9g} {:.9g}", a.on_comm_stream() ? 1 : 0, index, began_s, ended_s));
        }
      }
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      Report(fd, fmt::format("time {} {:.9g}", step, secs));
      if (exec.schedule.stage_rank[last] == me && shard == 0) {  // TP shards compute the same loss
        Report(fd, fmt::format("loss {} {:.17g}", step, loss_sum));
      }
    }
    // Peak resident memory of this process (CPU: the allocator's high-water mark
    // is the RSS peak; ru_maxrss is in KiB on Linux).
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    Report(fd, fmt::format("mem {}", static_cast<double>(usage.ru_maxrss) * 1024.0));
    // Replica 0's weights (every replica holds the same after the sync), frozen
    // ones too (they must come back unchanged); a sharded weight's statistics are
    // summed over its TP shards, so they describe the whole tensor.
    for (const auto& [v, stack] : stages) {
      for (const auto& item : stack->named_parameters()) {
        const torch::Tensor& w = item.value();
        torch::Tensor stats = torch::tensor(
            {w.sum().item<double>(), w.pow(2).sum().item<double>(), w.abs().sum().item<double>()}, torch::kDouble);
        const std::string& name = item.key();
        const bool sharded = T > 1 && (name.find(".q.") != std::string::npos || name.find(".k.") != std::string::npos ||
                                       name.find(".v.") != std::string::npos || name.find(".o.") != std::string::npos ||
                                       name.find(".up.") != std::string::npos ||
                                       name.find(".gate.") != std::string::npos ||
                                       name.find(".down.") != std::string::npos);
        if (sharded) AllReduceSum(*tp, stats);
        if (replica == 0 && shard == 0) {
          Report(fd, fmt::format("param {:.17g} {:.17g} {:.17g}", stats[0].item<double>(), stats[1].item<double>(),
                                 stats[2].item<double>()));
        }
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::string msg = e.what();
    for (char& c : msg) c = c == '\n' ? ' ' : c;
    Report(fd, "error " + msg);
    return 3;
  }
}

}  // namespace loom::runtime
