#include "loom/runtime/profiler.h"

#include <fmt/format.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <fstream>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef LOOM_HAVE_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "loom/cost/sm_sharing.h"
#include "loom/error.h"
#include "loom/runtime/c10d_calls.h"
#include "loom/runtime/child_process.h"
#include "loom/runtime/green_context.h"
#include "loom/runtime/report_line.h"
#include "loom/runtime/run.h"
#include "loom/runtime/torch_model.h"

namespace loom::runtime {

namespace {

struct Timer {
  torch::Device device;
  int repeats;
  torch::ScalarType dtype = torch::kFloat;  // what layers and kernels compute in
  // Median seconds of `fn` over at least `repeats` runs after one warm-up, and
  // over as many as fill 50 ms (at most 100): short runs are the noisiest (a
  // busy neighbour or a side-by-side copy's heavy phase lands on several of a
  // few), so they get more. `prepare` runs untimed before each.
  template <typename Fn, typename Prepare = void (*)()>
  double Median(
      Fn&& fn, Prepare&& prepare = [] {}) const {
    std::vector<double> t;
    int runs = repeats;
    for (int i = 0; i <= runs; ++i) {
      prepare();
      if (device.is_cuda()) torch::cuda::synchronize();
      const auto t0 = std::chrono::steady_clock::now();
      fn();
      if (device.is_cuda()) torch::cuda::synchronize();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (i == 0) runs = std::clamp(static_cast<int>(0.05 / std::max(s, 1e-6)), repeats, std::max(repeats, 100));
      if (i > 0) t.push_back(s);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  }
};

std::string CpuName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown CPU";
}

// The packing of `batch` sequences of `seq` tokens for module `module` (what a
// single layer reads: its lengths).
MicrobatchPacking Sequences(const Model& model, int module, int64_t batch, int64_t seq) {
  MicrobatchPacking p;
  p.modules.resize(model.modules.size());
  for (int64_t b = 0; b < batch; ++b) p.modules[module].push_back({0, 0, -1, seq, {{-1, 0, seq}}});
  return p;
}

// Layer (mi, li) of the model alone on `device`, fed a random input of `batch`
// sequences of `seq` tokens and a random output gradient. Not copyable: `mb`
// points at `packing`.
// In `dtype` as the runtime computes under mixed precision: fp32 weights whose
// copies the layer computes with, and activations (its input and output) in dtype.
struct OneLayer {
  OneLayer(const Model& model, int mi, int li, int64_t batch, int64_t seq, const torch::Device& device,
           torch::ScalarType dtype)
      : module(mi),
        stack(model, std::vector<LayerRange>{{model.modules[mi].name, li, li + 1}}, 1),
        packing(Sequences(model, mi, batch, seq)),
        mb{&packing, 0, 1, device},
        x(torch::randn({1, batch * seq, model.modules[mi].layers[li].hidden},
                       torch::TensorOptions().device(device).dtype(dtype))
              .requires_grad_(true)),
        g(torch::randn({1, batch * seq, model.modules[mi].layers[li].hidden},
                       torch::TensorOptions().device(device).dtype(dtype))) {
    stack->to(device);
    stack->SetComputeDtype(dtype);
  }
  OneLayer(const OneLayer&) = delete;
  OneLayer& operator=(const OneLayer&) = delete;
  torch::Tensor Forward() { return stack->forward({{module, x}}, mb).at(module); }
  void ClearGradients() {
    stack->zero_grad();
    stack->ClearComputeCopies();  // as the runtime's step does: each step casts afresh
    x.mutable_grad() = torch::Tensor();
  }

  int module;
  LayerStack stack;
  MicrobatchPacking packing;
  MicrobatchInput mb;
  torch::Tensor x, g;
};

ProfileLayerPoint MeasureLayer(const Model& model, int mi, int li, int64_t batch, int64_t seq, const Timer& timer) {
  const Layer& l = model.modules[mi].layers[li];
  OneLayer one(model, mi, li, batch, seq, timer.device, timer.dtype);
  ProfileLayerPoint pt;
  pt.label = fmt::format("{} layer {}", model.modules[mi].name, li);
  pt.shape = ShapeOf(l);
  pt.frozen = l.frozen;
  pt.batch = batch;
  pt.seq = seq;
  // Recorded by autograd, as the runtime's forward is: under no grad the
  // weights' 16-bit copies would be cast afresh each time (ComputeCopies keeps
  // them only while autograd records), where a step casts them once.
  pt.forward_s = timer.Median([&] { one.Forward(); });
  // The backward alone: a fresh forward (and no gradients) before each.
  torch::Tensor y;
  pt.backward_s = timer.Median([&] { y.backward(one.g); },
                               [&] {
                                 one.ClearGradients();
                                 y = one.Forward();
                               });
  return pt;
}

#ifdef LOOM_HAVE_CUDA
// Layer (mi, li) forward + backward on `sms` SMs of a green context (0: the
// whole GPU, the default stream): one point of the engine's scaling surface.
SmScalingPoint MeasureLayerOnSms(const Model& model, int mi, int li, int64_t batch, int64_t seq, int sms,
                                 const Timer& timer) {
  OneLayer one(model, mi, li, batch, seq, timer.device, timer.dtype);
  const int device = timer.device.index() < 0 ? 0 : timer.device.index();
  std::unique_ptr<GreenStreamPool> pool;
  std::optional<c10::cuda::CUDAStreamGuard> guard;
  if (sms > 0) {
    pool = std::make_unique<GreenStreamPool>(device, std::vector<std::vector<int>>{{sms}});
    guard.emplace(c10::cuda::getStreamFromExternal(static_cast<cudaStream_t>(pool->Stream(0, 0)),
                                                   static_cast<c10::DeviceIndex>(device)));
  }
  SmScalingPoint pt;
  pt.module = fmt::format("{} layer {} {}x{}", model.modules[mi].name, li, batch, seq);
  pt.layers = 1;
  pt.sms = sms > 0 ? sms : ReadSmPartitionRules(device).sm_count;
  pt.time_s = timer.Median([&] {
    one.ClearGradients();
    one.Forward().backward(one.g);
  });
  return pt;
}
#endif

// Messages of these sizes bounce between two processes of this machine (Gloo
// over loopback TCP, as `loom run` sends them); process 0 writes the median
// one-way time of each ("link BYTES SECONDS") and of an all-reduce of the same
// bytes ("allreduce BYTES SECONDS") to `fd`, one line each, in the line form
// of the workers' reports (report_line.h), so MeasureLinkOnce reads them with
// its checked numbers.
constexpr int64_t kLinkBytes[] = {4 << 10, 64 << 10, 1 << 20, 8 << 20};

int BounceMessages(int rank, int port, int repeats, int fd) {
  try {
    auto store = MakeStore("127.0.0.1", rank, 2, port, 30);
    auto pg = MakeGroup(store, "link", rank, 2, 30, "127.0.0.1", false);
    std::string out;
    for (int64_t bytes : kLinkBytes) {
      std::vector<at::Tensor> t{torch::zeros({bytes / 4})};
      std::vector<double> one_way;
      for (int i = 0; i <= repeats; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        if (rank == 0) {
          pg->send(t, 1, 0)->wait();
          pg->recv(t, 1, 0)->wait();
        } else {
          pg->recv(t, 0, 0)->wait();
          pg->send(t, 0, 0)->wait();
        }
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (i > 0) one_way.push_back(s / 2);
      }
      std::sort(one_way.begin(), one_way.end());
      out += fmt::format("link {} {:.9g}\n", bytes, one_way[one_way.size() / 2]);
      // The same bytes all-reduced over the two (a collective's own cost: Gloo's threads and algorithm).
      std::vector<double> reduce;
      for (int i = 0; i <= repeats; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        pg->allreduce(t)->wait();
        if (i > 0) reduce.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      std::sort(reduce.begin(), reduce.end());
      out += fmt::format("allreduce {} {:.9g}\n", bytes, reduce[reduce.size() / 2]);
    }
    if (rank == 0 && write(fd, out.data(), out.size()) != static_cast<ssize_t>(out.size())) return 4;
    return 0;
  } catch (const std::exception& e) {
    // One line: a line break inside what() would start a line that is no report.
    std::string what = e.what();
    std::replace(what.begin(), what.end(), '\n', ' ');
    const std::string msg = fmt::format("error {}\n", what);
    if (write(fd, msg.data(), msg.size()) < 0) return 3;
    return 3;
  }
}

// latency + bytes / bandwidth fitted by least squares to (bytes, seconds);
// `steps` messages per operation (a 2-process ring all-reduce takes 2).
Link FitLink(const std::vector<std::pair<double, double>>& points, int steps, const char* what) {
  double mx = 0, my = 0;
  for (const auto& [x, y] : points) {
    mx += x / points.size();
    my += y / points.size();
  }
  double sxy = 0, sxx = 0;
  for (const auto& [x, y] : points) {
    sxy += (x - mx) * (y - my);
    sxx += (x - mx) * (x - mx);
  }
  const double per_byte_s = sxy / sxx;
  if (per_byte_s <= 0) {
    throw Error(fmt::format("loom profile: the {}'s times do not grow with the message size; measure again", what));
  }
  // A negative intercept is the fit's noise around a latency too small to resolve: none.
  return Link{1.0 / per_byte_s, std::max(0.0, my - per_byte_s * mx) / steps};
}

// The link between two processes of this machine (latency + bytes / bandwidth,
// fitted to the messages' one-way times) and a step of their ring collectives
// (fitted to all-reduces of the same sizes, two steps each). Forked before this
// process uses torch (children of a process that did inherit its thread pools).
std::pair<Link, Link> MeasureLinkOnce(int repeats) {
  const int port = FreePort();
  int fds[2];
  if (pipe(fds) != 0) throw Error("loom profile: cannot create a pipe to measure the link");
  pid_t pids[2];
  const pid_t self = getpid();
  for (int r = 0; r < 2; ++r) {
    pids[r] = fork();
    if (pids[r] < 0) throw Error("loom profile: cannot start a process to measure the link");
    if (pids[r] == 0) {
      DieWithParent(self);
      close(fds[0]);
      _exit(BounceMessages(r, port, repeats, fds[1]));
    }
  }
  close(fds[1]);
  std::string text;
  char buf[512];
  pollfd pfd{fds[0], POLLIN, 0};
  while (poll(&pfd, 1, 120000) > 0) {
    const ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  int failed = 0;
  for (pid_t pid : pids) {
    kill(pid, SIGKILL);  // no-op when it has exited; a stalled one is stopped
    int status = 0;
    waitpid(pid, &status, 0);
    failed += WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
  }
  // A process that failed wrote why ("error ...") or was stopped mid-way: its text is the message.
  if (failed > 0) throw Error(fmt::format("loom profile: measuring the link between two processes failed: {}", text));
  std::vector<std::pair<double, double>> points, reduces;  // (bytes, seconds)
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    // Every line is a measurement: one that is not is an error naming it,
    // never dropped (a dropped point would leave the fit on fewer sizes).
    ReportLine report(line);
    if (report.kind() != "link" && report.kind() != "allreduce") {
      throw Error(
          fmt::format("loom profile: the link measurement's line '{}' is neither 'link BYTES SECONDS' nor "
                      "'allreduce BYTES SECONDS'",
                      line));
    }
    const double bytes = static_cast<double>(report.Integer());
    const double seconds = report.Number();
    if (!report.Rest().empty()) {
      throw Error(fmt::format("loom profile: the link measurement's line '{}' has fields after its seconds", line));
    }
    if (!(std::isfinite(seconds) && seconds >= 0)) {
      throw Error(fmt::format("loom profile: the link measurement's line '{}' has {} where a time in seconds belongs",
                              line, seconds));
    }
    (report.kind() == "link" ? points : reduces).push_back({bytes, seconds});
  }
  if (points.size() != std::size(kLinkBytes) || reduces.size() != std::size(kLinkBytes)) {
    throw Error(
        fmt::format("loom profile: measuring the link between two processes gave {} link and {} all-reduce "
                    "times of {} each: {}",
                    points.size(), reduces.size(), std::size(kLinkBytes), text));
  }
  return {FitLink(points, 1, "link"), FitLink(reduces, 2, "all-reduce")};
}

// On a shared machine one round's times can come out flat or falling (another
// process took the cores); up to three rounds before giving up.
std::pair<Link, Link> MeasureLink(int repeats) {
  for (int round = 1;; ++round) {
    try {
      return MeasureLinkOnce(repeats);
    } catch (const Error& e) {
      const bool noisy = std::string(e.what()).find("do not grow with the message size") != std::string::npos;
      if (!noisy || round == 3) throw;
    }
  }
}

// A layer never takes less time on more sequences of no shorter length: a
// point measured slower than one that dominates it (more sequences, each at
// least as long) caught the machine busy (a side-by-side copy in its heavy
// phase, the VM's neighbours). Each point's forward and backward become the
// least over the points that dominate it, itself included. Seen: a ViT layer's
// backward at 1 x 64 tokens measured 11.9 ms and at 4 x 64 6.9 ms, which made a
// plan of 1-sample microbatches predicted 3x slower than it ran.
void MonotoneLayerTimes(std::vector<ProfileLayerPoint>& points) {
  for (auto& p : points) {
    for (const auto& q : points) {
      if (q.label != p.label || q.frozen != p.frozen || q.batch < p.batch || q.seq < p.seq) continue;
      p.forward_s = std::min(p.forward_s, q.forward_s);
      p.backward_s = std::min(p.backward_s, q.backward_s);
    }
  }
}

}  // namespace

// The layers and kernels into `p` (the measurement `loom profile` repeats in
// its side-by-side processes).
void MeasureInto(Profile& p, const Model& model, const ProfilerOptions& o);

Profile MeasureProfile(const Model& model, const ProfilerOptions& o) {
  if (o.tokens.empty()) throw Error("loom profile: --tokens: give at least one token count");
  for (int64_t t : o.tokens) {
    if (t <= 0) throw Error(fmt::format("loom profile: --tokens: {} is not a positive token count", t));
  }
  if (o.threads <= 0) throw Error(fmt::format("loom profile: --threads {}: must be positive", o.threads));
  if (o.concurrent <= 0) throw Error(fmt::format("loom profile: --concurrent {}: must be positive", o.concurrent));
  if (o.concurrent > 1 && o.device == Device::kCuda) {
    throw Error("loom profile: --concurrent is for ranks sharing CPU cores; each CUDA rank has its own GPU");
  }
  if (o.device == Device::kCuda && !torch::cuda::is_available()) {
    throw Error(
        "loom profile: --device cuda, but this libtorch sees no CUDA device (scripts/build-cuda.sh builds "
        "against a CUDA libtorch)");
  }
  FindGpu(o.gpu);                                          // the datasheet must exist
  const auto [link, collective] = MeasureLink(o.repeats);  // first: it forks
  // Ranks that share this machine's cores: measured beside copies of the
  // same measurement (forked before this process uses torch; they die with it).
  std::vector<pid_t> load;
  struct Reap {
    std::vector<pid_t>* pids;
    ~Reap() {
      for (pid_t pid : *pids) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
      }
    }
  } reap{&load};
  const pid_t self = getpid();
  for (int i = 1; i < o.concurrent; ++i) {
    const pid_t pid = fork();
    if (pid < 0) throw Error("loom profile: cannot start a process to measure beside");
    if (pid == 0) {
      DieWithParent(self);
      try {
        for (;;) {
          Profile scratch;
          MeasureInto(scratch, model, o);
        }
      } catch (...) {
      }
      _exit(0);
    }
    load.push_back(pid);
  }
  Profile p;
  p.gpu = o.gpu;
  p.applies_to = {};  // never a GPU's default: it describes this machine
  p.precision = o.precision;
  p.link = link;
  p.collective = collective;
  p.source = fmt::format(
      "loom profile --device {}: libtorch {}, {}, {} thread(s), {} process(es) side by side, {}, "
      "medians of >= {} runs (>= 50 ms each point)",
      DeviceName(o.device), TORCH_VERSION, o.device == Device::kCuda ? "CUDA" : CpuName(), o.threads, o.concurrent,
      PrecisionName(o.precision), o.repeats);
  MeasureInto(p, model, o);
  return p;
}

void MeasureInto(Profile& p, const Model& model, const ProfilerOptions& o) {
  SetComputeThreads(o.threads);
  const Timer timer{o.device == Device::kCuda ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU), o.repeats,
                    ComputeDtype(o.precision)};
  // TF32 matmuls on a GPU for tf32, as `loom run` sets them.
  if (timer.device.is_cuda()) {
    at::globalContext().setFloat32MatmulPrecision(o.precision == Precision::kTf32 ? "high" : "highest");
  }
  const auto opts = torch::TensorOptions().device(timer.device).dtype(timer.dtype);
  const double e = ElementBytes(o.precision);  // bytes per element
  // Layers: each distinct transformer shape once (frozen and trainable apart).
  std::set<std::tuple<ProfileShape, bool>> seen;
  std::set<std::pair<int64_t, int64_t>> linears;  // (in, out) of every matrix product
  std::set<std::pair<int64_t, int64_t>> heads;    // (heads, head_dim) of every attention core
  std::vector<std::pair<int, int>> shape_layers;  // (module, layer) of each distinct shape
  for (size_t mi = 0; mi < model.modules.size(); ++mi) {
    const auto& layers = model.modules[mi].layers;
    for (size_t li = 0; li < layers.size(); ++li) {
      const Layer& l = layers[li];
      switch (l.kind) {
        case LayerKind::kTransformer: {
          const int64_t d = l.hidden / l.heads;
          linears.insert({{l.hidden, l.heads * d},
                          {l.hidden, l.kv_heads * d},
                          {l.heads * d, l.hidden},
                          {l.hidden, l.ffn_hidden},
                          {l.ffn_hidden, l.hidden}});
          heads.insert({l.heads, d});
          if (!seen.insert({ShapeOf(l), l.frozen}).second) break;
          shape_layers.push_back({static_cast<int>(mi), static_cast<int>(li)});
          // Every token count in sequences of every shorter measured length
          // (attention grows with the length, the rest with the tokens).
          for (int64_t t : o.tokens) {
            for (int64_t seq : o.tokens) {
              if (seq > t || t % seq != 0) continue;
              p.layers.push_back(MeasureLayer(model, static_cast<int>(mi), static_cast<int>(li), t / seq, seq, timer));
            }
          }
          break;
        }
        case LayerKind::kMlpProjector:
          linears.insert({{l.in_dim, l.hidden}, {l.hidden, l.out_dim}});
          break;
        case LayerKind::kLmHead:
          linears.insert({l.hidden, l.vocab});
          break;
        default:
          break;
      }
    }
  }
  MonotoneLayerTimes(p.layers);
#ifdef LOOM_HAVE_CUDA
  // The engine's SM scaling (Mosaic §3.3): sequences of the shortest measured
  // length, each token count, 8..partitionable SMs and the whole GPU.
  if (timer.device.is_cuda() && o.sm_scaling && !shape_layers.empty()) {
    const SmPartitionRules rules = ReadSmPartitionRules(timer.device.index() < 0 ? 0 : timer.device.index());
    std::vector<int> quotas;
    for (int q : {8, 16, 32, 64}) {
      if (q >= rules.min_sms && q % rules.alignment_sms == 0 && q < rules.partitionable_sms) quotas.push_back(q);
    }
    quotas.push_back(rules.partitionable_sms);
    quotas.push_back(0);  // the whole GPU
    std::vector<SmScalingPoint> points;
    const int64_t seq = *std::min_element(o.tokens.begin(), o.tokens.end());
    for (const auto& [mi, li] : shape_layers) {
      for (int64_t t : o.tokens) {
        for (int q : quotas)
          points.push_back(MeasureLayerOnSms(model, mi, li, std::max<int64_t>(1, t / seq), seq, q, timer));
      }
    }
    const SmScalingFit fit = FitSmScaling(points, rules.sm_count);
    p.sm_sharing.serial_fraction = fit.law.serial_fraction;
    p.sm_sharing.launch_floor_s_per_layer = fit.law.launch_floor_s_per_layer;
    p.source += fmt::format("; sm_sharing fitted on {} green-context points of {} layer shape(s), mean error {:.1f}%",
                            points.size(), shape_layers.size(), 100 * fit.mean_abs_error);
  }
#endif
  // Kernels, in the profile's dtype (`e` bytes an element).
  for (int64_t s : o.tokens) {
    const double S = static_cast<double>(s);
    for (const auto& [in, out] : linears) {
      const torch::Tensor a = torch::randn({s, in}, opts), b = torch::randn({in, out}, opts);
      const double t = timer.Median([&] { torch::mm(a, b); });
      p.ops.push_back({OpClass::kGemm, 2.0 * S * static_cast<double>(in * out),
                       e * (S * static_cast<double>(in + out) + static_cast<double>(in * out)), t});
    }
    for (const auto& [h, d] : heads) {
      const torch::Tensor q = torch::randn({1, h, s, d}, opts), k = torch::randn({1, h, s, d}, opts),
                          v = torch::randn({1, h, s, d}, opts);
      const double t =
          timer.Median([&] { torch::matmul(torch::softmax(torch::matmul(q, k.transpose(-2, -1)), -1), v); });
      const double H = static_cast<double>(h), D = static_cast<double>(d);
      // Unfused: the scores are written, read by the softmax, written and read again.
      p.ops.push_back({OpClass::kAttention, 4.0 * S * S * D * H, e * (4.0 * S * D * H + 4.0 * H * S * S), t});
    }
    for (const auto& [in, out] : linears) {
      if (in > out) continue;  // the widest activations: the MLP's inner width
      const torch::Tensor a = torch::randn({s, out}, opts);
      const double t = timer.Median([&] { torch::gelu(a); });
      p.ops.push_back({OpClass::kElementwise, S * static_cast<double>(out), 2.0 * e * S * static_cast<double>(out), t});
    }
  }
}

}  // namespace loom::runtime
