#include "loom/strategies/pipeweaver/ranking.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>
#include <thread>

#include "loom/data/rng.h"

namespace loom {

namespace {

struct Node {
  int group = -1;  // the group this node places (-1: root)
  int parent = -1;
  int depth = 0;
  std::vector<int> children;
  std::vector<int> untried;  // groups that can come next and have no child yet
  int visits = 0;
  double best = 0;
  bool complete = false;  // every order below it has been tried
};

// Search state shared by the workers.
struct Tree {
  const StageFlow& flow;
  const RankingOptions& opt;
  std::vector<Node> nodes;
  std::mutex mu;
  RankingResult result;
  std::chrono::steady_clock::time_point start;

  // Groups placed on the path to `n`, in order.
  std::vector<int> Path(int n) const {
    std::vector<int> path;
    for (; n > 0; n = nodes[n].parent) path.push_back(nodes[n].group);
    std::reverse(path.begin(), path.end());
    return path;
  }
  // Per microbatch, the next step (StageFlow::event) to place after `path`.
  std::vector<int> NextStep(const std::vector<int>& path) const {
    std::vector<int> next(flow.num_microbatches, 0);
    for (int e : path) ++next[(e % flow.num_groups()) / flow.num_modules];
    return next;
  }
  std::vector<int> Available(const std::vector<int>& next) const {
    std::vector<int> out;
    for (int k = 0; k < flow.num_microbatches; ++k) {
      if (next[k] < 2 * flow.num_modules) out.push_back(flow.event(next[k], k));
    }
    return out;
  }
  int NewNode(int parent, int group) {
    Node n;
    n.group = group;
    n.parent = parent;
    n.depth = parent < 0 ? 0 : nodes[parent].depth + 1;
    nodes.push_back(n);
    const int id = static_cast<int>(nodes.size()) - 1;
    std::vector<int> path = Path(id);
    nodes[id].untried = Available(NextStep(path));
    nodes[id].complete = nodes[id].untried.empty();
    return id;
  }
  double Ucb(int parent, int child) const {
    const Node& c = nodes[child];
    return std::pow(c.best, opt.alpha) +
           opt.beta * std::sqrt(std::log(std::max(1, nodes[parent].visits)) / std::max(1, c.visits));
  }
  // Alg. 1 lines 3-6: descend by UCB through fully expanded nodes, expand one child. -1: all explored.
  int SelectAndExpand(Rng& rng) {
    int x = 0;
    while (nodes[x].untried.empty()) {
      int best = -1;
      double best_ucb = -1;
      for (int c : nodes[x].children) {
        if (nodes[c].complete) continue;
        const double u = Ucb(x, c);
        if (u > best_ucb) best_ucb = u, best = c;
      }
      if (best < 0) return -1;
      ++nodes[x].visits;  // counted on the way down, so parallel workers spread out
      x = best;
    }
    ++nodes[x].visits;
    auto& untried = nodes[x].untried;
    const size_t pick = static_cast<size_t>(rng.UniformInt(0, static_cast<int64_t>(untried.size()) - 1));
    const int g = untried[pick];
    untried.erase(untried.begin() + static_cast<long>(pick));
    const int u = NewNode(x, g);
    nodes[x].children.push_back(u);
    ++nodes[u].visits;
    return u;
  }
  // Alg. 1 lines 14-17, and completeness upwards.
  void Backpropagate(int x, double score) {
    for (; x >= 0; x = nodes[x].parent) {
      nodes[x].best = std::max(nodes[x].best, score);
      Node& n = nodes[x];
      if (!n.complete && n.untried.empty()) {
        n.complete = std::all_of(n.children.begin(), n.children.end(), [&](int c) { return nodes[c].complete; });
      }
    }
  }
  void Offer(const std::vector<int>& position, Interleaving&& il) {
    ++result.rollouts;
    const bool better = result.position.empty() || (il.fits && !result.best.fits) ||
                        (il.fits == result.best.fits && il.makespan_s < result.best.makespan_s);
    if (better) {
      result.position = position;
      result.best = std::move(il);
      result.trace.push_back({Elapsed(), result.best.makespan_s});
    }
  }
  double Elapsed() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); }
};

double Score(const Interleaving& il) { return il.fits ? il.score : 0.5 * il.score; }

// A random valid completion of `path` as a position vector.
std::vector<int> Complete(const Tree& tree, const std::vector<int>& path, Rng& rng) {
  const StageFlow& f = tree.flow;
  std::vector<int> next = tree.NextStep(path);
  std::vector<int> position(f.num_events(), 0);
  int at = 0;
  for (int e : path) position[e] = at++;
  std::vector<int> open;
  for (int k = 0; k < f.num_microbatches; ++k) {
    if (next[k] < 2 * f.num_modules) open.push_back(k);
  }
  while (!open.empty()) {
    const size_t i = static_cast<size_t>(rng.UniformInt(0, static_cast<int64_t>(open.size()) - 1));
    const int k = open[i];
    position[f.event(next[k], k)] = at++;
    if (++next[k] == 2 * f.num_modules) open.erase(open.begin() + static_cast<long>(i));
  }
  return position;
}

void Work(Tree& tree, int worker) {
  Rng rng(Rng::Mix(tree.opt.seed, static_cast<uint64_t>(worker)));
  Interleaver il(tree.flow);
  const int batch = tree.opt.workers > 1 ? tree.opt.sync_every : 1;
  while (true) {
    std::vector<std::pair<int, std::vector<int>>> picked;  // (node, path)
    {
      std::lock_guard<std::mutex> lock(tree.mu);
      const bool clock_spent = tree.opt.budget_s > 0 && tree.Elapsed() > tree.opt.budget_s;
      if (tree.result.rollouts >= tree.opt.max_rollouts || clock_spent) {
        tree.result.budget_hit = tree.result.budget_hit || clock_spent;
        return;
      }
      for (int b = 0; b < batch; ++b) {
        const int u = tree.SelectAndExpand(rng);
        if (u < 0) {
          tree.result.exhausted = true;
          break;
        }
        picked.push_back({u, tree.Path(u)});
      }
      if (picked.empty()) return;
    }
    std::vector<std::pair<int, double>> scores;
    std::vector<std::pair<std::vector<int>, Interleaving>> runs;
    for (const auto& [u, path] : picked) {
      const bool leaf = static_cast<int>(path.size()) == tree.flow.num_events();
      double best = 0;
      for (int t = 0; t < (leaf ? 1 : tree.opt.tries); ++t) {  // Alg. 1 lines 8-13
        std::vector<int> position = Complete(tree, path, rng);
        Interleaving run = il.Run(position, tree.opt.interleave);
        best = std::max(best, Score(run));
        runs.push_back({std::move(position), std::move(run)});
      }
      scores.push_back({u, best});
    }
    std::lock_guard<std::mutex> lock(tree.mu);
    for (auto& [position, run] : runs) tree.Offer(position, std::move(run));
    for (auto [u, s] : scores) tree.Backpropagate(u, s);
  }
}

}  // namespace

RankingResult RankByMcts(const StageFlow& flow, const RankingOptions& options) {
  Tree tree{flow, options, {}, {}, {}, std::chrono::steady_clock::now()};
  tree.NewNode(-1, -1);
  {
    Interleaver il(flow);
    const std::vector<int> initial = DefaultRanking(flow);
    tree.Offer(initial, il.Run(initial, options.interleave));
  }
  if (options.workers <= 1) {
    Work(tree, 0);
  } else {
    std::vector<std::thread> threads;
    for (int w = 0; w < options.workers; ++w) threads.emplace_back(Work, std::ref(tree), w);
    for (auto& t : threads) t.join();
  }
  tree.result.elapsed_s = tree.Elapsed();
  return std::move(tree.result);
}

}  // namespace loom
