// The rendezvous store (issue 45): c10d's TCPStore bound its server socket to
// every interface with no authentication, so a client on the machine's
// external address could read and write a live job's keys. The store now
// listens on the address it is given (127.0.0.1 for a run on one machine).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "loom/error.h"
#include "loom/runtime/c10d_calls.h"
#include "loom/runtime/run.h"

namespace loom {
namespace {

// The local addresses (hex, as the kernel writes them) of every listening TCP
// socket on `port`, IPv4 and IPv6 (/proc/net/tcp, /proc/net/tcp6).
std::vector<std::string> ListeningAddresses(int port) {
  std::vector<std::string> out;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state;
      fields >> slot >> local >> remote >> state;
      const size_t colon = local.rfind(':');
      if (state != "0A" || colon == std::string::npos) continue;  // 0A: LISTEN
      if (std::stoi(local.substr(colon + 1), nullptr, 16) == port) out.push_back(local.substr(0, colon));
    }
  }
  return out;
}

TEST(Store, ListensOnLoopbackOnlyForARunOnOneMachine) {
  const int port = FreePort();
  auto store = runtime::MakeStore("127.0.0.1", 0, 1, port, 10);
  store->set("key", std::vector<uint8_t>{1});
  const auto listening = ListeningAddresses(port);
  ASSERT_FALSE(listening.empty()) << "nothing listens on port " << port;
  for (const auto& a : listening) {
    // 127.0.0.1 in /proc/net/tcp's byte order; "::" would be 32 zeros in tcp6.
    EXPECT_EQ(a, "0100007F") << "the store listens on " << a << ", not only on 127.0.0.1";
  }
}

// A run over several machines serves its store on the --master address; a
// name that resolves to loopback here (Debian maps the hostname to 127.0.1.1)
// would leave the other nodes refused, so it is an error naming why.
TEST(Store, ARunOverSeveralMachinesRefusesALoopbackAddress) {
  try {
    runtime::MakeStore("localhost", 0, 2, FreePort(), 2, false, /*other_machines=*/true);
    FAIL() << "a store for several machines listened on loopback";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("loopback address here, which the other nodes cannot reach"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace loom
