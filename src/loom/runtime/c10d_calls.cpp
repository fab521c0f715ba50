// Creating stores and process groups (c10d_calls.h): the one translation unit
// that includes c10d's Gloo and NCCL headers.
//
// Gloo's own headers do not come with PyPI's wheel; the build takes Debian's
// libgloo-dev (older than the Gloo inside libtorch). That is safe here because
// ProcessGroupGloo holds every Gloo object through a shared_ptr (its size and
// layout do not depend on Gloo's), the constructor and the device factory run
// inside libtorch, and this file only moves the returned device pointer into
// the options: no Gloo code is compiled from the older headers.
#include "loom/runtime/c10d_calls.h"

#include "loom/error.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace loom::runtime {

namespace {

// The store server's listening socket, bound to `host` alone. c10d's TCPStore
// binds its own socket to every interface (IPv6 "::", which takes IPv4 too)
// and has no authentication, so anyone who reaches the port can read and
// write a live job's keys; a run on one machine serves on 127.0.0.1, a run
// over several on the address the user named (--master; docs/runtime.md says
// what to firewall). TCPStore takes the socket over (TCPStoreOptions::masterListenFd).
bool IsLoopback(const sockaddr* a) {
  if (a->sa_family == AF_INET) {
    return (ntohl(reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr) >> 24) == 127;
  }
  return a->sa_family == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr);
}

int ListenOn(const std::string& host, int port, bool other_machines) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0) {
    throw Error(fmt::format("the store's address {}: {}", host, gai_strerror(rc)));
  }
  std::string why = "no address";
  int fd = -1;
  // A loopback address given as such (127.0.0.1: several launchers on one
  // machine, as the tests run them) is meant; a name that resolves to one is
  // not, where other machines must reach it.
  in6_addr numeric{};
  const bool literal =
      inet_pton(AF_INET, host.c_str(), &numeric) == 1 || inet_pton(AF_INET6, host.c_str(), &numeric) == 1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    if (other_machines && !literal && IsLoopback(a->ai_addr)) {
      why =
          "it is this machine's loopback address here, which the other nodes cannot reach (pass --master this "
          "machine's network address)";
      continue;
    }
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    const int on = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 2048) != 0) {
      why = std::strerror(errno);
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) {
    throw Error(
        fmt::format("the store cannot listen on {}:{}: {} (the address must be this machine's own)", host, port, why));
  }
  return fd;
}

}  // namespace

c10::intrusive_ptr<c10d::Store> MakeStore(const std::string& master, int rank, int world, int port, double timeout_s,
                                          bool client_only, bool other_machines) {
  c10d::TCPStoreOptions so;
  so.port = static_cast<uint16_t>(port);
  so.isServer = rank == 0 && !client_only;
  if (so.isServer) so.masterListenFd = ListenOn(master, port, other_machines);
  if (world > 0) so.numWorkers = world;
  so.waitWorkers = world > 0;
  so.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  try {
    return c10::make_intrusive<c10d::TCPStore>(master, so);
  } catch (const c10::Error& e) {
    // c10d says "Timed out after N seconds waiting for clients. 1/2 clients
    // joined" or "The client socket has timed out ... trying to connect",
    // with a stack trace: the cause to name is the process or node that
    // never came (issue 45), so the message says which and what to check.
    std::string said = e.what_without_backtrace();
    said = said.substr(0, said.find('\n'));
    const std::string where = fmt::format("{}:{}", master, port);
    if (so.isServer) {
      throw Error(fmt::format(
          "the run's store at {} waited {:.0f} s for its {} processes and not all joined ({}){}", where, timeout_s,
          world, said,
          other_machines ? "; a node never started or cannot reach this address: start every node with the same "
                           "--nnodes and --master, each with its own --node-rank, and let them reach this port"
                         : "; a process of this machine ended or stalled before it joined"));
    }
    throw Error(fmt::format("cannot reach the run's store at {} within {:.0f} s ({}){}", where, timeout_s, said,
                            other_machines ? "; is node 0 started, with the same --master, and is the port open "
                                             "to this machine?"
                                           : "; its server, process 0 of this machine, ended or stalled"));
  }
}

Group MakeGroup(const c10::intrusive_ptr<c10d::Store>& store, const std::string& name, int rank, int size,
                double timeout_s, const std::string& host, bool cuda) {
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(name, store);
  if (cuda) {
#ifdef USE_C10D_NCCL
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    opts->timeout = timeout;
    return c10::make_intrusive<c10d::ProcessGroupNCCL>(prefixed, rank, size, opts);
#else
    throw std::runtime_error("this build has no NCCL: CUDA tensors cannot be communicated (build with LOOM_CUDA)");
#endif
  }
  auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
  opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(host));
  return c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, rank, size, opts);
}

}  // namespace loom::runtime
