// The c10d calls the runtime makes, in one place: c10d's C++ API moved between
// libtorch 1.13 (Debian 12's libtorch-dev) and 2.x (PyTorch 2.11 on GPU
// machines). Debian's headers guard ProcessGroupGloo behind USE_C10D_GLOO
// (CMakeLists.txt defines it). Include only from runtime .cpp files.
#pragma once

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <utility>
#include <vector>

namespace loom::runtime {

using GlooGroup = c10::intrusive_ptr<c10d::ProcessGroupGloo>;

// The rendezvous store: rank 0 serves it on master:port for `world` ranks.
inline c10::intrusive_ptr<c10d::Store> MakeStore(const std::string& master, int rank, int world, int port,
                                                 double timeout_s) {
  c10d::TCPStoreOptions so;
  so.port = static_cast<uint16_t>(port);
  so.isServer = rank == 0;
  so.numWorkers = world;
  so.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  return c10::make_intrusive<c10d::TCPStore>(master, so);
}

// A Gloo group named `name` of `size` members (this process is member `rank`),
// rendezvousing under its name in `store`. Operations time out after `timeout_s`.
inline GlooGroup MakeGlooGroup(const c10::intrusive_ptr<c10d::Store>& store, const std::string& name, int rank,
                               int size, double timeout_s, const std::string& host) {
  auto opts = c10d::ProcessGroupGloo::Options::create(std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
  opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(host));
  return c10::make_intrusive<c10d::ProcessGroupGloo>(c10::make_intrusive<c10d::PrefixStore>(name, store), rank, size,
                                                     opts);
}

// Sums `t` over the group in place.
inline void AllReduceSum(c10d::ProcessGroupGloo& pg, at::Tensor& t) {
  std::vector<at::Tensor> v{t};
  pg.allreduce(v)->wait();
}

// Starts summing `t` over the group in place; done when the handle's wait returns.
inline auto AllReduceAsync(c10d::ProcessGroupGloo& pg, std::vector<at::Tensor>& t) { return pg.allreduce(t); }

// The handle of an asynchronous operation (c10d::ProcessGroup::Work in 1.13, c10d::Work in 2.x).
using WorkHandle = decltype(std::declval<c10d::ProcessGroupGloo&>().send(std::declval<std::vector<at::Tensor>&>(), 0, 0));

// Starts sending `t` (kept alive by the returned handle's caller until it completes):
// sends run beside compute, like the simulator's communication stream.
inline WorkHandle SendAsync(c10d::ProcessGroupGloo& pg, std::vector<at::Tensor>& t, int peer, int tag) {
  return pg.send(t, peer, tag);
}

inline void Recv(c10d::ProcessGroupGloo& pg, at::Tensor& t, int peer, int tag) {
  std::vector<at::Tensor> v{t};
  pg.recv(v, peer, tag)->wait();
}

}  // namespace loom::runtime
