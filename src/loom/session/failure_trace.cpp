#include "loom/session/failure_trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "loom/error.h"
#include "loom/input_file.h"

namespace loom {

FailureTrace GenerateFailureTrace(int nodes, double mtbf_s, double duration_s, uint64_t seed, int min_nodes) {
  if (nodes < 1) throw Error(fmt::format("failure trace: {} nodes; it needs at least 1", nodes));
  if (!(mtbf_s > 0)) throw Error(fmt::format("failure trace: mean time between failures {} s; it must be > 0", mtbf_s));
  if (!(duration_s > 0)) throw Error(fmt::format("failure trace: duration {} s; it must be > 0", duration_s));
  FailureTrace t;
  t.nodes = nodes;
  t.duration_s = duration_s;
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap(1.0 / mtbf_s);
  std::vector<int> alive(nodes);
  for (int i = 0; i < nodes; ++i) alive[i] = i;
  double now = 0;
  while (static_cast<int>(alive.size()) > std::max(0, min_nodes)) {
    now += gap(rng);
    if (now >= duration_s) break;
    std::uniform_int_distribution<size_t> pick(0, alive.size() - 1);
    const size_t i = pick(rng);
    t.events.push_back({now, NodeEvent::kFail, alive[i]});
    alive.erase(alive.begin() + static_cast<std::ptrdiff_t>(i));
  }
  return t;
}

FailureTrace ReadFailureTrace(const std::string& path, int nodes, double duration_s) {
  InputLines in(path, "failure trace");
  FailureTrace t;
  t.nodes = nodes;
  t.duration_s = duration_s;
  std::set<int> dead;
  std::string line;
  while (in.Next(line)) {
    const int n = in.line_number();
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    std::istringstream ss(line);
    std::string time_text, kind, node_text;
    if (!(ss >> time_text)) continue;  // blank or a comment
    if (!(ss >> kind >> node_text)) throw Error(fmt::format("{}:{}: expected \"TIME_S fail|join NODE\"", path, n));
    if (std::string extra; ss >> extra) {
      throw Error(fmt::format("{}:{}: '{}' after the node; expected \"TIME_S fail|join NODE\" (a # starts a comment)",
                              path, n, extra));
    }
    // The whole token, as a finite number of seconds (an istream read "nan"
    // as no number and "0x10" as 0).
    char* end = nullptr;
    const double time_s = std::strtod(time_text.c_str(), &end);
    if (*end != '\0' || !(time_s >= 0) || time_s > kMaxReplaySeconds) {
      throw Error(fmt::format("{}:{}: time '{}'; valid: seconds from the start of training, 0 to {:g}", path, n,
                              time_text, kMaxReplaySeconds));
    }
    if (kind != "fail" && kind != "join") {
      throw Error(fmt::format("{}:{}: event '{}'; valid: fail, join", path, n, kind));
    }
    const long long node_id = std::strtoll(node_text.c_str(), &end, 10);
    if (*end != '\0' || node_text.empty() || node_id < 0 || node_id >= nodes) {
      throw Error(fmt::format("{}:{}: node '{}'; the cluster's nodes are 0..{}", path, n, node_text, nodes - 1));
    }
    const int node = static_cast<int>(node_id);
    if (!t.events.empty() && time_s < t.events.back().time_s) {
      throw Error(
          fmt::format("{}:{}: time {} s is before the previous event's; events go in time order", path, n, time_s));
    }
    const bool fail = kind == "fail";
    if (fail == static_cast<bool>(dead.count(node))) {
      throw Error(fmt::format("{}:{}: node {} {}", path, n, node, fail ? "has already failed" : "has not failed"));
    }
    if (fail) {
      dead.insert(node);
    } else {
      dead.erase(node);
    }
    t.events.push_back({time_s, fail ? NodeEvent::kFail : NodeEvent::kJoin, node});
  }
  return t;
}

}  // namespace loom
