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
#include "loom/pipeline/validate.h"
#include "loom/plan/compile_plan.h"
#include "loom/runtime/c10d_compat.h"
#include "loom/runtime/packing.h"
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


// A message's tag: unique per (payload, producer stage, consumer stage, producer microbatch).
int Tag(Payload payload, int from, int to, int mb, int stages, int microbatches) {
  return ((static_cast<int>(payload) * stages + from) * stages + to) * microbatches + mb;
}

// Per layer of stage v, the recomputation microbatch k of replica r runs with.
std::vector<Recompute> LayerRecompute(const ExecutionPlan& e, int r, int v, int k) {
  const auto& per_layer = e.replicas[r][v][k].layer_recompute;
  if (!per_layer.empty()) return per_layer;
  return std::vector<Recompute>(e.stages[v].num_layers(), e.stages[v].recompute);
}

// ZeRO-1: this replica's slice [lo, hi) of a gradient bucket's flat
// parameters (chunks of `chunk` elements per replica, the last one short),
// with the AdamW state of only that slice.
struct ShardedBucket {
  int stage = 0, bucket = 0;
  int64_t total = 0, chunk = 0, lo = 0, hi = 0;
  torch::Tensor master;
};

// One flat buffer of the tensors' values (a message or a bucket).
torch::Tensor Flatten(const std::vector<torch::Tensor>& parts) {
  std::vector<torch::Tensor> flat;
  for (const auto& t : parts) flat.push_back(t.reshape({-1}));
  return torch::cat(flat);
}

// `flat` cut into views shaped like `like`.
std::vector<torch::Tensor> SplitLike(const torch::Tensor& flat, const std::vector<torch::Tensor>& like) {
  std::vector<torch::Tensor> out;
  int64_t off = 0;
  for (const auto& t : like) {
    out.push_back(flat.slice(0, off, off + t.numel()).view(t.sizes()));
    off += t.numel();
  }
  return out;
}

// The stage's trainable parameters cut into `count` buckets of about equal
// size, last parameters first (their gradients are ready first in the backward).
std::vector<std::vector<torch::Tensor>> Buckets(const std::vector<torch::Tensor>& params, int count) {
  int64_t total = 0;
  for (const auto& p : params) total += p.numel();
  std::vector<std::vector<torch::Tensor>> out(count);
  int64_t seen = 0;
  for (auto it = params.rbegin(); it != params.rend(); ++it) {
    const int b = std::min<int64_t>(count - 1, seen * count / std::max<int64_t>(1, total));
    out[b].push_back(*it);
    seen += it->numel();
  }
  return out;
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
  ExecutionPlan exec = CompilePlan(model, cluster, workload, plan, batch);
  for (const auto& st : exec.stages) CheckRunnable(model, st.layers);
  for (const auto& stages : exec.replicas) {
    for (const auto& mbs : stages) {
      for (const auto& mb : mbs) {
        for (const auto& piece : mb.pieces) {
          if (piece.item >= 0) {
            throw Error("runtime: microbatches that carry single images of a sample (PipeWeaver's encoder "
                        "sub-microbatches) are not run yet");
          }
        }
      }
    }
  }
  PackMicrobatch(model, batch, std::vector<int>{0});  // the workload's inputs are ones the runtime can pack
  return exec;
}

int RunWorker(const WorkerSpec& spec, int fd) {
  try {
    const Model& model = *spec.model;
    torch::set_num_threads(std::max(1, spec.options.threads_per_rank));
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
    // CUDA: one GPU per process of this node, NCCL groups; else host tensors and Gloo.
    const bool cuda = spec.options.device == "cuda";
    const torch::Device device = cuda ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(
                                                                        spec.rank % spec.options.local_processes))
                                      : torch::Device(torch::kCPU);
    auto pg = MakeGroup(store, "world", spec.rank, spec.world, spec.options.timeout_s, host, cuda);
    // This shard's copies in every replica: they hold the same weights and sync their gradients.
    Group dp, tp;
    if (D > 1) dp = MakeGroup(store, fmt::format("dp{}.{}", me, shard), replica, D, spec.options.timeout_s, host, cuda);
    TensorParallel tensor_parallel;
    if (T > 1) {
      tp = MakeGroup(store, fmt::format("tp{}.{}", replica, me), shard, T, spec.options.timeout_s, host, cuda);
      tensor_parallel = {shard, T, [tp](torch::Tensor& t) { AllReduceSum(*tp, t); }};
    }
    // This rank's stages, built from the same per-layer seeds as any other rank's copy.
    std::map<int, LayerStack> stages;
    std::map<int, std::vector<std::vector<torch::Tensor>>> buckets;  // stage -> its gradient buckets
    for (int v = 0; v < exec.schedule.num_stages(); ++v) {
      if (exec.schedule.stage_rank[v] != me) continue;
      stages.emplace(v, LayerStack(model, exec.stages[v].layers, spec.workload->seed, tensor_parallel));
      stages.at(v)->to(device);
      std::vector<torch::Tensor> trainable;  // frozen layers get no optimizer state and no gradient sync
      for (auto& p : stages.at(v)->parameters()) {
        if (p.requires_grad()) trainable.push_back(p);
      }
      buckets[v] = Buckets(trainable, kGradientBuckets);
    }
    const int loss_module = static_cast<int>(model.modules.size()) - 1;
    // Megatron's tied word embeddings: when the loss module's embedding and
    // tied head are in different stages, each holds the matrix and their
    // gradients are summed before every optimizer step (on this rank if it
    // holds both, else over the pair of ranks).
    std::vector<torch::Tensor> tied;
    Group tie;
    {
      const Module& lm = model.modules[loss_module];
      int embedding_stage = -1, head_stage = -1;
      for (int v = 0; v < exec.schedule.num_stages(); ++v) {
        for (const auto& r : exec.stages[v].layers) {
          if (r.module != lm.name) continue;
          if (r.begin == 0) embedding_stage = v;
          if (r.end == static_cast<int>(lm.layers.size())) head_stage = v;
        }
      }
      if (lm.layers.back().kind == LayerKind::kLmHead && lm.layers.back().tied && embedding_stage != head_stage &&
          !lm.layers[0].frozen) {
        const int re = exec.schedule.stage_rank[embedding_stage], rh = exec.schedule.stage_rank[head_stage];
        if (re == me) tied.push_back(stages.at(embedding_stage)->EmbeddingTable());
        if (rh == me) tied.push_back(stages.at(head_stage)->TiedHeadCopy());
        if (re != rh && (re == me || rh == me)) {
          tie = MakeGroup(store, fmt::format("tie{}.{}", replica, shard), me == re ? 0 : 1, 2,
                          spec.options.timeout_s, host, cuda);
        }
      }
    }
    // ZeRO-1 (the plan's zero_stage >= 1 with data parallelism): each replica
    // keeps AdamW state for its 1/D slice of every gradient bucket only,
    // steps that slice and all-gathers the updated weights. AdamW is
    // elementwise, so this is the replicated update, computed once. Stages
    // holding a tied embedding keep the replicated optimizer (their gradient
    // is summed with the other copy's at the step, after the buckets).
    std::vector<ShardedBucket> shards;
    std::set<int> sharded;
    for (const auto& [v, stage_buckets] : buckets) {
      bool holds_tied = false;
      for (const auto& t : tied) {
        for (const auto& p : stages.at(v)->parameters()) holds_tied = holds_tied || p.is_same(t);
      }
      if (D < 2 || exec.stages[v].zero_stage < 1 || holds_tied) continue;
      sharded.insert(v);
      for (size_t b = 0; b < stage_buckets.size(); ++b) {
        if (stage_buckets[b].empty()) continue;
        ShardedBucket sb{v, static_cast<int>(b)};
        for (const auto& p : stage_buckets[b]) sb.total += p.numel();
        sb.chunk = (sb.total + D - 1) / D;
        sb.lo = std::min(sb.total, replica * sb.chunk);
        sb.hi = std::min(sb.total, sb.lo + sb.chunk);
        torch::NoGradGuard no_grad;
        sb.master = Flatten(stage_buckets[b]).slice(0, sb.lo, sb.hi).clone().requires_grad_(true);
        shards.push_back(std::move(sb));
      }
    }
    std::vector<torch::Tensor> replicated, masters;
    for (const auto& [v, stage_buckets] : buckets) {
      if (sharded.count(v)) continue;
      for (const auto& bucket : stage_buckets) replicated.insert(replicated.end(), bucket.begin(), bucket.end());
    }
    for (const auto& sb : shards) masters.push_back(sb.master);
    // A rank whose layers are all frozen has nothing to update.
    std::unique_ptr<torch::optim::AdamW> opt, opt_shards;
    if (!replicated.empty()) {
      opt = std::make_unique<torch::optim::AdamW>(replicated, torch::optim::AdamWOptions(spec.options.learning_rate));
    }
    if (!masters.empty()) {
      opt_shards =
          std::make_unique<torch::optim::AdamW>(masters, torch::optim::AdamWOptions(spec.options.learning_rate));
    }
    for (int step = 0; step < spec.options.steps; ++step) {
      if (spec.rank == spec.options.kill_rank && step == spec.options.kill_step) _exit(17);  // fault injection
      // Drawing and compiling the step's batch is the loader's and planner's work:
      // done once, before the step's clock starts.
      if (step > 0) {
        batch = DrawBatch(*spec.workload, step);
        exec = CompileForRuntime(model, *spec.cluster, *spec.workload, *spec.plan, batch);
        if (const std::string why = MessageOrderMismatch(exec.schedule); cuda && !why.empty()) {
          throw Error(fmt::format("step {}: NCCL needs messages received in the order they are sent: {}", step, why));
        }
      }
      const Schedule& sch = exec.schedule;
      const int S = sch.num_stages(), M = sch.num_microbatches;
      const int last = S - 1;
      const int64_t batch_text_tokens = BatchTextTokens(batch);
      std::map<std::pair<int, int>, MicrobatchPacking> packings;  // (stage, mb)
      for (int v = 0; v < S; ++v) {
        for (int k = 0; k < M; ++k) {
          packings.emplace(std::make_pair(v, k), PackMicrobatch(model, batch, exec.replicas[replica][v][k].pieces));
        }
      }
      auto input_of = [&](int v, int k) {
        return MicrobatchInput{&packings.at({v, k}), step, static_cast<int64_t>(batch.samples.size()), device};
      };
      const auto t0 = std::chrono::steady_clock::now();
      // Per (stage, mb): the tensors that entered the stage and those it hands
      // on (the loss, on the last), in CrossingAfter order; received gradients
      // (flat); weight gradients the W pass still owes.
      std::map<std::pair<int, int>, std::vector<torch::Tensor>> input, output;
      std::map<std::pair<int, int>, torch::Tensor> grad_out;
      std::map<std::pair<int, int>, std::vector<WeightGradDeferral::Pending>> deferred;
      double loss_sum = 0;
      // Sends and gradient all-reduces in flight (the communication stream):
      // their buffers live until the wait.
      std::vector<std::pair<WorkHandle, std::vector<at::Tensor>>> sending;
      std::vector<std::tuple<WorkHandle, std::vector<at::Tensor>, int, int>> reducing;  // (work, flat, stage, bucket)
      const bool last_step = step + 1 == spec.options.steps;
      for (size_t index = 0; index < sch.ranks[me].size(); ++index) {
        const Action& a = sch.ranks[me][index];
        const int v = a.stage, k = a.microbatch;
        const double began_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        switch (a.kind) {
          case ActionKind::kForward: {
            ModuleTensors in;
            if (v > 0) {
              const auto crossing = CrossingAfter(model, exec.stages[v - 1].layers.back());
              // The producer on this rank (interleaved): cut the graph here too.
              if (sch.stage_rank[v - 1] == me) {
                std::vector<torch::Tensor> cut;
                for (const auto& t : output.at({v - 1, k})) cut.push_back(t.detach().requires_grad_(true));
                input[{v, k}] = cut;
              }
              const auto& received = input.at({v, k});
              for (size_t i = 0; i < crossing.size(); ++i) in[crossing[i].module] = received[i];
            }
            const MicrobatchInput mb = input_of(v, k);
            ModuleTensors out = stages.at(v)->forward(in, mb, LayerRecompute(exec, replica, v, k));
            std::vector<torch::Tensor>& handed = output[{v, k}];
            if (v == last) {
              torch::Tensor loss = TextLoss(out.at(loss_module), mb, batch_text_tokens);
              loss_sum += loss.item<double>();
              handed.push_back(loss);
            } else {
              for (const auto& c : CrossingAfter(model, exec.stages[v].layers.back())) handed.push_back(out.at(c.module));
            }
            break;
          }
          case ActionKind::kBackward:
          case ActionKind::kBackwardData: {
            std::vector<torch::Tensor> outs, grads;
            const auto& handed = output.at({v, k});
            if (v == last) {
              outs = handed;
              grads.push_back(torch::ones_like(handed[0]));
            } else {
              std::vector<torch::Tensor> g;
              if (sch.stage_rank[v + 1] == me) {
                for (const auto& t : input.at({v + 1, k})) g.push_back(t.grad());
              } else {
                g = SplitLike(grad_out.at({v, k}), handed);
              }
              for (size_t i = 0; i < handed.size(); ++i) {
                if (handed[i].requires_grad() && g[i].defined()) {
                  outs.push_back(handed[i]);
                  grads.push_back(g[i]);
                }
              }
            }
            if (outs.empty()) break;  // frozen layers fed by nothing trainable: no backward at all
            WeightGradDeferral& deferral = stages.at(v)->deferral();
            deferral.active = a.kind == ActionKind::kBackwardData;  // ZB: weight gradients wait for W
            torch::autograd::backward(outs, grads);
            deferral.active = false;
            if (!deferral.pending.empty()) deferred[{v, k}] = std::move(deferral.pending);
            deferral.pending.clear();
            output.erase({v, k});  // the graph is spent
            break;
          }
          case ActionKind::kBackwardWeight:
            if (auto d = deferred.find({v, k}); d != deferred.end()) {
              ApplyWeightGradients(d->second);
              deferred.erase(d);
            }
            break;
          case ActionKind::kSend: {
            const bool act = a.payload == Payload::kActivation;
            const int to = a.peer_stage >= 0 ? a.peer_stage : (act ? v + 1 : v - 1);
            std::vector<torch::Tensor> parts;
            if (act) {
              for (const auto& t : output.at({v, k})) parts.push_back(t.detach());
            } else {
              for (const auto& t : input.at({v, k})) {
                parts.push_back(t.grad().defined() ? t.grad() : torch::zeros_like(t));  // nothing trainable upstream
              }
            }
            const int tag = act ? Tag(a.payload, v, to, k, S, M) : Tag(a.payload, to, v, k, S, M);
            sending.emplace_back(WorkHandle(), std::vector<at::Tensor>{Flatten(parts)});
            sending.back().first = SendAsync(*pg, sending.back().second, global_of(a.peer), tag);
            break;
          }
          case ActionKind::kRecv: {
            const bool act = a.payload == Payload::kActivation;
            const int mine = a.peer_stage >= 0 ? a.peer_stage : (act ? v + 1 : v - 1);
            const int tag = act ? Tag(a.payload, v, mine, k, S, M) : Tag(a.payload, mine, v, k, S, M);
            if (act) {
              // Shapes follow from the microbatch's packing: the modules crossing
              // the boundary after the producer's last layer.
              std::vector<torch::Tensor> shapes;
              const MicrobatchPacking& packing = packings.at({v, k});
              for (const auto& c : CrossingAfter(model, exec.stages[v].layers.back())) {
                shapes.push_back(torch::empty({1, packing.Tokens(c.module), c.width}, device));
              }
              torch::Tensor flat = Flatten(shapes);
              Recv(*pg, flat, global_of(a.peer), tag);
              std::vector<torch::Tensor> received;
              for (auto& t : SplitLike(flat, shapes)) received.push_back(t.clone().requires_grad_(true));
              input[{mine, k}] = received;
            } else {
              int64_t numel = 0;
              for (const auto& t : output.at({mine, k})) numel += t.numel();
              torch::Tensor flat = torch::empty({numel}, device);
              Recv(*pg, flat, global_of(a.peer), tag);
              grad_out[{mine, k}] = flat;
            }
            break;
          }
          case ActionKind::kCollective: {
            // One bucket of the stage's gradients summed over its data-parallel
            // group (each replica's loss is its share of the global batch's
            // mean, so the sum is the global gradient); asynchronous, finished
            // at the wait.
            if (D < 2) break;
            const auto& bucket = buckets.at(v).at(a.bucket);
            if (bucket.empty()) break;
            std::vector<torch::Tensor> grads;
            for (const auto& p : bucket) grads.push_back(p.grad().defined() ? p.grad() : torch::zeros_like(p));
            reducing.emplace_back(WorkHandle(), std::vector<at::Tensor>{Flatten(grads)}, v, a.bucket);
            std::get<0>(reducing.back()) = AllReduceAsync(*dp, std::get<1>(reducing.back()));
            break;
          }
          case ActionKind::kWait:
            for (auto& [work, buffers] : sending) work->wait();
            sending.clear();
            for (auto& [work, flat, stage, b] : reducing) {
              work->wait();
              auto& bucket = buckets.at(stage).at(b);
              if (sharded.count(stage)) {  // ZeRO-1: only this replica's slice is stepped here
                for (auto& sb : shards) {
                  if (sb.stage == stage && sb.bucket == b) sb.master.mutable_grad() = flat[0].slice(0, sb.lo, sb.hi).clone();
                }
                continue;
              }
              const auto parts = SplitLike(flat[0], bucket);
              for (size_t i = 0; i < bucket.size(); ++i) {
                if (!bucket[i].grad().defined()) bucket[i].mutable_grad() = torch::zeros_like(bucket[i]);
                bucket[i].mutable_grad().copy_(parts[i]);
              }
            }
            reducing.clear();
            break;
          case ActionKind::kOptimizerStep:
            if (!tied.empty()) {
              torch::NoGradGuard no_grad;
              torch::Tensor sum = torch::zeros_like(tied[0]);
              for (const auto& t : tied) {
                if (t.grad().defined()) sum += t.grad();
              }
              if (tie) AllReduceSum(*tie, sum);
              for (auto& t : tied) t.mutable_grad() = sum.clone();
            }
            if (opt) {
              opt->step();
              opt->zero_grad();
            }
            if (opt_shards) {
              opt_shards->step();
              opt_shards->zero_grad();
              torch::NoGradGuard no_grad;
              for (const auto& sb : shards) {
                torch::Tensor mine = torch::zeros({sb.chunk}, sb.master.options());
                mine.slice(0, 0, sb.hi - sb.lo).copy_(sb.master);
                const torch::Tensor all = torch::cat(AllGather(*dp, mine)).slice(0, 0, sb.total);
                auto& bucket = buckets.at(sb.stage).at(sb.bucket);
                const auto parts = SplitLike(all, bucket);
                for (size_t i = 0; i < bucket.size(); ++i) bucket[i].copy_(parts[i]);
              }
              for (int v : sharded) {
                for (auto& bucket : buckets.at(v)) {
                  for (auto& p : bucket) p.mutable_grad() = torch::Tensor();
                }
              }
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
    // On a GPU: the caching allocator's peak of allocated bytes instead.
    Report(fd, fmt::format("mem {}", cuda ? CudaPeakAllocatedBytes(device.index())
                                          : static_cast<double>(usage.ru_maxrss) * 1024.0));
    // Replica 0's weights (every replica holds the same after the sync), frozen
    // ones too (they must come back unchanged); a sharded weight's statistics are
    // summed over its TP shards, so they describe the whole tensor.
    for (const auto& [v, stack] : stages) {
      for (const auto& item : stack->named_parameters()) {
        const torch::Tensor& w = item.value();
        torch::Tensor stats = torch::tensor(
            {w.sum().item<double>(), w.pow(2).sum().item<double>(), w.abs().sum().item<double>()}, torch::kDouble);
        const std::string& name = item.key();
        if (name.size() >= 10 && name.compare(name.size() - 10, 10, "tied_table") == 0) continue;  // a copy
        if (stack->IsSharded(name)) AllReduceSum(*tp, stats);
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
