#include "loom/runtime/green_context.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <thread>

#include "loom/error.h"
#include "loom/runtime/cuda_driver.h"

#ifdef LOOM_HAVE_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <torch/torch.h>
#endif

namespace loom::runtime {

#ifdef LOOM_HAVE_CUDA

namespace {

void Check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    const char* msg = nullptr;
    Driver().cuGetErrorString_(r, &msg);
    throw Error(fmt::format("CUDA driver: {}: {}", what, msg ? msg : "unknown error"));
  }
}

CUdevice Device(int device) {
  // cuInit, not cudaFree(nullptr): that would make a context on the current
  // device (GPU 0) in a worker whose device is another.
  Check(Driver().cuInit_(0), "cuInit");
  CUdevice d;
  Check(Driver().cuDeviceGet_(&d, device), "cuDeviceGet");
  return d;
}

double Now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// The device's SMs cut once into groups of the alignment (132 SMs: 16 groups
// of 8, 4 left over). A green context of q SMs combines q / alignment of these
// groups; partitions of one set take consecutive, disjoint groups. (Splitting
// what a previous split left is refused by the driver: "insufficient or
// non-applicable", measured on the H100 with driver 580.)
std::vector<CUdevResource> SmGroups(CUdevice dev, int alignment) {
  CUdevResource full, rest;
  Check(Driver().cuDeviceGetDevResource_(dev, &full, CU_DEV_RESOURCE_TYPE_SM), "cuDeviceGetDevResource");
  unsigned int groups = full.sm.smCount / static_cast<unsigned int>(alignment);
  std::vector<CUdevResource> out(groups);
  Check(
      Driver().cuDevSmResourceSplitByCount_(out.data(), &groups, &full, &rest, 0, static_cast<unsigned int>(alignment)),
      "cuDevSmResourceSplitByCount");
  out.resize(groups);
  return out;
}

// One green context over groups [first, first + count) and its stream.
void Create(CUdevice dev, std::vector<CUdevResource>& groups, int first, int count, CUgreenCtx* ctx, CUstream* stream) {
  if (first + count > static_cast<int>(groups.size())) {
    throw Error(fmt::format("green context: {} SM groups asked from group {}, the device split into {}", count, first,
                            groups.size()));
  }
  CUdevResourceDesc desc;
  Check(Driver().cuDevResourceGenerateDesc_(&desc, groups.data() + first, static_cast<unsigned int>(count)),
        "cuDevResourceGenerateDesc");
  Check(Driver().cuGreenCtxCreate_(ctx, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM), "cuGreenCtxCreate");
  Check(Driver().cuGreenCtxStreamCreate_(stream, *ctx, CU_STREAM_NON_BLOCKING, 0), "cuGreenCtxStreamCreate");
}

}  // namespace

SmPartitionRules ReadSmPartitionRules(int device) {
  const CUdevice dev = Device(device);
  CUdevResource full;
  Check(Driver().cuDeviceGetDevResource_(dev, &full, CU_DEV_RESOURCE_TYPE_SM), "cuDeviceGetDevResource");
  SmPartitionRules r;
  r.sm_count = static_cast<int>(full.sm.smCount);
  r.min_sms = static_cast<int>(full.sm.minSmPartitionSize);
  r.alignment_sms = static_cast<int>(full.sm.smCoscheduledAlignment);
  r.partitionable_sms = static_cast<int>(SmGroups(dev, r.alignment_sms).size()) * r.alignment_sms;
  return r;
}

GreenStreamPool::GreenStreamPool(int device, const std::vector<std::vector<int>>& sets) {
  const SmPartitionRules rules = ReadSmPartitionRules(device);
  const CUdevice dev = Device(device);
  for (const auto& set : sets) {
    int sum = 0;
    for (int q : set) {
      if (q < rules.min_sms || q % rules.alignment_sms != 0 || q > rules.sm_count) {
        throw Error(fmt::format("green context of {} SMs: device {} partitions {} SMs in multiples of {}, at least {}",
                                q, device, rules.sm_count, rules.alignment_sms, rules.min_sms));
      }
      sum += q;
    }
    if (sum > rules.sm_count) {
      throw Error(
          fmt::format("green contexts of {} SMs together on device {}, which has {}", sum, device, rules.sm_count));
    }
    const double t0 = Now_s();
    auto groups = SmGroups(dev, rules.alignment_sms);
    if (sum > static_cast<int>(groups.size()) * rules.alignment_sms) {
      throw Error(
          fmt::format("green contexts of {} SMs together on device {}: its SMs split into {} groups of {} "
                      "({} SMs can be partitioned)",
                      sum, device, groups.size(), rules.alignment_sms, groups.size() * rules.alignment_sms));
    }
    streams_.emplace_back();
    contexts_.emplace_back();
    int first = 0;
    for (int q : set) {
      CUgreenCtx ctx;
      CUstream stream;
      Create(dev, groups, first, q / rules.alignment_sms, &ctx, &stream);
      first += q / rules.alignment_sms;
      contexts_.back().push_back(ctx);
      streams_.back().push_back(stream);
    }
    creation_s_.push_back(Now_s() - t0);
  }
}

GreenStreamPool::~GreenStreamPool() {
  for (auto& set : streams_) {
    for (void* s : set) cudaStreamDestroy(static_cast<cudaStream_t>(s));
  }
  for (auto& set : contexts_) {
    for (void* c : set) Driver().cuGreenCtxDestroy_(static_cast<CUgreenCtx>(c));
  }
}

namespace {

// An MLP stack like a small encoder's FFN half: `layers` x (x W1 -> GELU -> W2 + x), fwd + bwd.
struct Stack {
  std::vector<torch::Tensor> w1, w2;
  torch::Tensor x;
  Stack(int64_t hidden, int layers, int64_t tokens) {
    auto o = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
    for (int i = 0; i < layers; ++i) {
      w1.push_back((torch::randn({hidden, 4 * hidden}, o) * 0.02).requires_grad_());
      w2.push_back((torch::randn({4 * hidden, hidden}, o) * 0.02).requires_grad_());
    }
    x = torch::randn({tokens, hidden}, o);
  }
  void Step() {
    auto h = x;
    for (size_t i = 0; i < w1.size(); ++i) h = torch::gelu(torch::matmul(h, w1[i])).matmul(w2[i]) + h;
    h.sum().backward();
  }
};

double TimeIt(const std::function<void()>& f, int repeats) {
  f();
  torch::cuda::synchronize();
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) {
    const double t0 = Now_s();
    f();
    torch::cuda::synchronize();
    t.push_back(Now_s() - t0);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

std::string ProbeSmPartitions(int device, int repeats) {
  const SmPartitionRules rules = ReadSmPartitionRules(device);
  std::string out = fmt::format("device {}: {} SMs, partitions of at least {} in multiples of {}\n\n", device,
                                rules.sm_count, rules.min_sms, rules.alignment_sms);
  torch::Tensor warm = torch::ones({1}, torch::kCUDA);
  torch::cuda::synchronize();
  // 1. On-demand creation (and destruction) per quota.
  out += "green context + stream creation on demand (median, min, max of " + std::to_string(repeats) + "):\n";
  out += fmt::format("{:>5} {:>10} {:>10} {:>10}\n", "SMs", "median ms", "min ms", "max ms");
  const CUdevice dev = Device(device);
  const int partitionable = static_cast<int>(SmGroups(dev, rules.alignment_sms).size()) * rules.alignment_sms;
  for (int q = rules.min_sms; q <= partitionable; q += std::max(rules.alignment_sms, 16)) {
    std::vector<double> t;
    for (int i = 0; i < repeats; ++i) {
      const double t0 = Now_s();
      CUgreenCtx ctx;
      CUstream stream;
      auto groups = SmGroups(dev, rules.alignment_sms);
      Create(dev, groups, 0, q / rules.alignment_sms, &ctx, &stream);
      t.push_back(Now_s() - t0);
      cudaStreamDestroy(stream);
      Driver().cuGreenCtxDestroy_(ctx);
    }
    std::sort(t.begin(), t.end());
    out +=
        fmt::format("{:>5} {:>10.3f} {:>10.3f} {:>10.3f}\n", q, t[t.size() / 2] * 1e3, t.front() * 1e3, t.back() * 1e3);
  }
  // 2. A launch on a pre-created stream: switch to it and enqueue one small kernel.
  std::vector<std::vector<int>> quotas;
  const int groups = static_cast<int>(SmGroups(dev, rules.alignment_sms).size());
  out += fmt::format("the driver splits the SMs into {} groups of {}: {} SMs can be partitioned\n", groups,
                     rules.alignment_sms, groups * rules.alignment_sms);
  for (int q = rules.min_sms; q <= groups * rules.alignment_sms; q += rules.alignment_sms) quotas.push_back({q});
  GreenStreamPool pool(device, quotas);
  {
    torch::Tensor a = torch::ones({1024}, torch::kCUDA);
    const int n = 2000;
    auto launch = [&](bool green) {
      const double t0 = Now_s();
      for (int i = 0; i < n; ++i) {
        if (green) {
          c10::cuda::CUDAStreamGuard g(
              c10::cuda::getStreamFromExternal(static_cast<cudaStream_t>(pool.Stream(i % quotas.size(), 0)), device));
          a.add_(1);
        } else {
          a.add_(1);
        }
      }
      const double dt = (Now_s() - t0) / n;
      torch::cuda::synchronize();
      return dt;
    };
    launch(true);
    launch(false);
    out += fmt::format(
        "\nlaunch of one small kernel, host time: {:.4f} ms on a pre-created green stream (switching "
        "among {} of them), {:.4f} ms on the current stream\n",
        launch(true) * 1e3, quotas.size(), launch(false) * 1e3);
  }
  // 3. Two stacks side by side on disjoint partitions vs one after the other on the whole GPU.
  struct Pair {
    const char* name;
    int64_t ha, ta, hb, tb;
    int la, lb;
  };
  const Pair pairs[] = {{"h768x12 B4xS197 | h1280x8 B16xS257", 768, 4 * 197, 1280, 16 * 257, 12, 8},
                        {"h1024x24 B16xS257 | h768x12 B64xS197", 1024, 16 * 257, 768, 64 * 197, 24, 12}};
  out += "\nMLP stacks fwd+bwd, bf16, eager, one host thread (median ms):\n";
  out += fmt::format("{:<40} {:>9} {:>8} {:>8} {:>8} {:>9} {:>10} {:>9} {:>8}\n", "pair", "SMs a+b", "a full", "b full",
                     "a alone", "b alone", "together", "2 threads", "seq full");
  for (const auto& p : pairs) {
    Stack a(p.ha, p.la, p.ta), b(p.hb, p.lb, p.tb);
    const double full_a = TimeIt([&] { a.Step(); }, repeats), full_b = TimeIt([&] { b.Step(); }, repeats);
    const double seq = TimeIt(
        [&] {
          a.Step();
          b.Step();
        },
        repeats);
    for (int sa : {32, 56, 88}) {
      const int sb = partitionable - sa;
      GreenStreamPool two(device, {{sa, sb}});  // disjoint: sb comes from what sa left
      auto sa_stream = c10::cuda::getStreamFromExternal(static_cast<cudaStream_t>(two.Stream(0, 0)), device);
      auto sb_stream = c10::cuda::getStreamFromExternal(static_cast<cudaStream_t>(two.Stream(0, 1)), device);
      auto on = [](c10::cuda::CUDAStream s, Stack& st) {
        c10::cuda::CUDAStreamGuard g(s);
        st.Step();
      };
      const double alone_a = TimeIt([&] { on(sa_stream, a); }, repeats);
      const double alone_b = TimeIt([&] { on(sb_stream, b); }, repeats);
      const double together = TimeIt(
          [&] {
            on(sa_stream, a);
            on(sb_stream, b);
          },
          repeats);
      // One launching thread per module: the host floors no longer add up.
      const double threads = TimeIt(
          [&] {
            std::thread ta([&] { on(sa_stream, a); });
            std::thread tb([&] { on(sb_stream, b); });
            ta.join();
            tb.join();
          },
          repeats);
      out += fmt::format("{:<40} {:>4}+{:<4} {:>8.2f} {:>8.2f} {:>8.2f} {:>9.2f} {:>10.2f} {:>9.2f} {:>8.2f}\n", p.name,
                         sa, sb, full_a * 1e3, full_b * 1e3, alone_a * 1e3, alone_b * 1e3, together * 1e3,
                         threads * 1e3, seq * 1e3);
    }
  }
  return out;
}

#else

SmPartitionRules ReadSmPartitionRules(int) {
  throw Error("green contexts need a CUDA build of Loom (scripts/build-cuda.sh)");
}
GreenStreamPool::GreenStreamPool(int, const std::vector<std::vector<int>>&) {
  throw Error("green contexts need a CUDA build of Loom (scripts/build-cuda.sh)");
}
GreenStreamPool::~GreenStreamPool() = default;
std::string ProbeSmPartitions(int, int) {
  throw Error("`loom probe-sm` needs a CUDA build of Loom (scripts/build-cuda.sh) and a GPU");
}

#endif

}  // namespace loom::runtime
