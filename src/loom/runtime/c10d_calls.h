// The c10d calls the runtime makes, in one place, against PyTorch 2.x's API
// (the pinned 2.11, which is also the GPU machine's: requirements.txt), so that
// a change of c10d's API is a change of this file. The headers guard Gloo and
// NCCL behind USE_C10D_GLOO and USE_C10D_NCCL (cmake/pytorch.cmake defines
// them). Creating a store or a group is in c10d_calls.cpp, the one translation
// unit that includes Gloo's and NCCL's headers. Include only from runtime .cpp files
// and the runtime's tests.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#ifdef LOOM_HAVE_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "loom/runtime/fault_tolerance.h"

namespace loom::runtime {

using GroupBase = c10d::Backend;
using Group = c10::intrusive_ptr<GroupBase>;

// The rendezvous store: rank 0 serves it on master:port for `world` ranks,
// listening on that address alone (c10d_calls.cpp says why). world 0: a
// client of a store served elsewhere (a fault-tolerant run's store process,
// whose clients come and go), or with rank 0 that store's server.
// `other_machines`: clients on other machines must reach it, so a name that
// resolves to this machine's loopback (a hostname /etc/hosts maps to
// 127.0.1.1, as Debian's does) is refused, naming it; a loopback address
// given as one (127.0.0.1: several launchers on one machine) is taken.
c10::intrusive_ptr<c10d::Store> MakeStore(const std::string& master, int rank, int world, int port, double timeout_s,
                                          bool client_only = false, bool other_machines = false);

// A group named `name` of `size` members (this process is member `rank`),
// rendezvousing under its name in `store`: NCCL for CUDA tensors, else Gloo
// (bound to `host`). Operations time out after `timeout_s`.
Group MakeGroup(const c10::intrusive_ptr<c10d::Store>& store, const std::string& name, int rank, int size,
                double timeout_s, const std::string& host, bool cuda);

// Raised out of a wait when a fault-tolerant run's launcher has told this
// worker that a peer is gone (runtime/fault_tolerance.h): the operation may
// never complete, and the worker moves to the next generation instead.
struct Aborted : std::runtime_error {
  Aborted() : std::runtime_error("aborted: the launcher reconfigures the run") {}
};
// A fault-tolerant worker's control (null: a plain run, waits block).
using AbortFlag = WorkerControl*;

// Waits for a collective: with an abort flag, polls it (a collective runs on
// the group's own threads and completes there) and throws Aborted once set.
template <typename Work>
inline void Await(const Work& work, AbortFlag abort = nullptr) {
  if (abort != nullptr) {
    int spins = 0;
    while (!work->isCompleted()) {
      if (abort->abort.load()) throw Aborted();
      if (++spins > 64) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  work->wait();  // rethrows the operation's error
}

// Waits for a send or receive. Gloo completes those only inside wait() (there
// is nothing to poll), so the worker's control thread interrupts the wait
// (Work::abort wakes it without an error) once the launcher's command arrives.
template <typename Work>
inline void AwaitMessage(const Work& work, AbortFlag abort = nullptr) {
  if (abort == nullptr) {
    work->wait();
    return;
  }
  abort->SetInterrupt([w = work] { w->abort(); });
  try {
    work->wait();
  } catch (...) {
    abort->SetInterrupt({});
    throw;
  }
  abort->SetInterrupt({});
  if (abort->abort.load()) throw Aborted();
}

// Sums `t` over the group in place.
inline void AllReduceSum(GroupBase& pg, at::Tensor& t, AbortFlag abort = nullptr) {
  std::vector<at::Tensor> v{t};
  Await(pg.allreduce(v), abort);
}

// Waits (bounded) until the collective's own thread has let go of `tensors`
// once their operation completed, so that their memory is given back on this
// thread, whose allocations the worker's tensor-memory count sees
// (runtime/tensor_memory.h: a free on the group's thread would go uncounted,
// and the count would drift up with every collective).
// `held`: the references this thread holds itself (a tensor the caller may
// hold more references to is not for this: it would wait out the bound).
// Bounded at 50 ms (the group's thread lets go microseconds after it
// completes the operation).
inline void AwaitRelease(const at::Tensor& t, int64_t held = 1) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
  while (static_cast<int64_t>(t.use_count()) > held && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
}

// AllReduceSum of a tensor inside a layer's forward or backward (TP's and
// CP's sums, many a step), then, on a CPU, AwaitRelease of the references
// Gloo's thread took: what the caller holds is counted before the call, so
// that the tensor's later free comes on this thread. Without it the count
// drifted up by every sum a microbatch made (tiny-llm at TP 2, 8 microbatches:
// 1.9x and 2.5x the predicted peak, varying run to run). Not on CUDA: NCCL's
// work keeps its tensors until its watchdog sees it complete, and waiting out
// the bound at every layer would cost the step more than the count is worth.
inline void AllReduceSumHere(GroupBase& pg, at::Tensor& t, AbortFlag abort = nullptr) {
  const int64_t held = static_cast<int64_t>(t.use_count());
  AllReduceSum(pg, t, abort);
  if (!t.is_cuda()) AwaitRelease(t, held);
}

// Every member's `t` (equal shapes), in member order.
inline std::vector<at::Tensor> AllGather(GroupBase& pg, const at::Tensor& t, AbortFlag abort = nullptr) {
  std::vector<std::vector<at::Tensor>> out(1);
  for (int i = 0; i < pg.getSize(); ++i) out[0].push_back(at::empty_like(t));
  std::vector<at::Tensor> in{t};
  Await(pg.allgather(out, in), abort);
  for (const auto& o : out[0]) AwaitRelease(o);  // `t` is the caller's, and outlives the call
  return out[0];
}

// Every member's `mine` (at most `chunk` elements; zero-padded) into its
// place in `flat` ([members x chunk]), which the caller allocated once:
// nothing as large as it beside it. NCCL gathers straight into `flat`
// (_allgather_base, all_gather_into_tensor). Gloo's allgather flattens its
// outputs into a temporary as large as `flat` and copies them out
// (ProcessGroupGloo.cpp, AsyncAllgatherWork), and its _allgather_base calls
// that: a ZeRO-1 gather held a second copy of its bucket's weights at the
// step's end (tiny-omni's second stage, 1.08x its predicted peak). On a CPU
// each member broadcasts its own slice of `flat` in place instead, the same
// volume in `members` collectives.
inline void AllGatherInto(GroupBase& pg, const at::Tensor& mine, int64_t chunk, at::Tensor& flat,
                          AbortFlag abort = nullptr) {
  const int size = pg.getSize();
  if (flat.is_cuda()) {
    at::Tensor in = mine.numel() == chunk ? mine.contiguous() : at::zeros({chunk}, mine.options());
    if (mine.numel() != chunk) in.slice(0, 0, mine.numel()).copy_(mine);
    Await(pg._allgather_base(flat, in), abort);
    return;
  }
  at::Tensor own = flat.slice(0, pg.getRank() * chunk, (pg.getRank() + 1) * chunk);
  own.slice(0, 0, mine.numel()).copy_(mine);
  if (mine.numel() < chunk) own.slice(0, mine.numel(), chunk).zero_();
  // The caller's own references to flat's storage (a view of a buffer it keeps has several).
  const auto held = flat.storage().use_count() - 1;
  own = at::Tensor();
  for (int i = 0; i < size; ++i) {
    std::vector<at::Tensor> slice{flat.slice(0, i * chunk, (i + 1) * chunk)};
    c10d::BroadcastOptions o;
    o.rootRank = i;
    Await(pg.broadcast(slice, o), abort);
  }
  // The slices the group's thread held share flat's storage.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
  while (flat.storage().use_count() > held && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
}

// `t` from member `root` to every member, in place.
inline void Broadcast(GroupBase& pg, at::Tensor& t, int root, AbortFlag abort = nullptr) {
  std::vector<at::Tensor> v{t};
  c10d::BroadcastOptions o;
  o.rootRank = root;
  Await(pg.broadcast(v, o), abort);
}

// Starts summing `t` over the group in place; done when the handle's wait returns.
inline auto AllReduceAsync(GroupBase& pg, std::vector<at::Tensor>& t) { return pg.allreduce(t); }

// Starts a reduce-scatter of `in` (size members x chunk): member i ends with
// the sum over members of chunk i, as `out.view({size, chunk}).sum(0)` once
// the handle's wait returns: each member sends chunk i to member i (all-to-all,
// the volume of a ring reduce-scatter) and sums what it gets, one operation
// that Gloo and NCCL both implement for any group size.
inline auto ReduceScatterAsync(GroupBase& pg, at::Tensor& in, at::Tensor& out) {
  std::vector<int64_t> counts;  // empty: equal splits
  return pg.alltoall_base(out, in, counts, counts);
}

// ReduceScatterAsync's all-to-all, waited for, then on a CPU the release of
// both buffers by Gloo's thread, as AllReduceSumHere.
inline void AllToAllHere(GroupBase& pg, at::Tensor& in, at::Tensor& out, AbortFlag abort = nullptr) {
  const int64_t held_in = static_cast<int64_t>(in.use_count()), held_out = static_cast<int64_t>(out.use_count());
  Await(ReduceScatterAsync(pg, in, out), abort);
  if (in.is_cuda()) return;
  AwaitRelease(in, held_in);
  AwaitRelease(out, held_out);
}

// Gives back (bytes 0) or takes again the memory of a parameter's storage
// while autograd keeps referring to the same tensor (FSDP's "free the
// unsharded parameter" between its uses): the graph saved for the backward
// sees the data again once it is gathered back in.
inline void ResizeStorage(const at::Tensor& t, size_t bytes) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(s->allocator()->allocate(bytes));
  s->set_nbytes(bytes);
}

// The handle of an asynchronous operation (c10d::Work).
using WorkHandle = decltype(std::declval<GroupBase&>().send(std::declval<std::vector<at::Tensor>&>(), 0, 0));

// Starts sending `t` (kept alive by the returned handle's caller until it completes):
// sends run beside compute, like the simulator's communication stream. Gloo
// matches messages by tag; NCCL by their order between the two ranks (the
// schedule's per-pair order, which its sends and receives share).
inline WorkHandle SendAsync(GroupBase& pg, std::vector<at::Tensor>& t, int peer, int tag) {
  return pg.send(t, peer, tag);
}

inline void Recv(GroupBase& pg, at::Tensor& t, int peer, int tag, AbortFlag abort = nullptr) {
  std::vector<at::Tensor> v{t};
  AwaitMessage(pg.recv(v, peer, tag), abort);
}

// The CUDA caching allocator's peak of allocated bytes on `device` (-1 without CUDA).
// Index 0 of the statistics is the aggregate pool in every version.
inline double CudaPeakAllocatedBytes(int device) {
#ifdef LOOM_HAVE_CUDA
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
  return static_cast<double>(stats.allocated_bytes[0].peak);
#else
  (void)device;
  return -1;
#endif
}

}  // namespace loom::runtime
