#include "loom/strategies/search/module_waves.h"

#include <algorithm>

namespace loom {

bool ModuleWaves::IsUpstream(const std::string& module) const {
  for (const auto& b : upstream_branches) {
    if (std::find(b.begin(), b.end(), module) != b.end()) return true;
  }
  return false;
}

ModuleWaves SplitWaves(const Model& model) {
  const int n = static_cast<int>(model.modules.size());
  // upstream[i]: i feeds (transitively) a backbone; downstream[i]: a backbone feeds i.
  std::vector<char> up(n, 0), down(n, 0), backbone(n, 0);
  for (int i = 0; i < n; ++i) backbone[i] = model.modules[i].role == ModuleRole::kBackbone;
  for (int i = n - 1; i >= 0; --i) {
    if (backbone[i] || up[i]) {
      for (int j : model.modules[i].inputs) up[j] = !backbone[j];
    }
  }
  for (int i = 0; i < n; ++i) {
    for (int j : model.modules[i].inputs) {
      if ((backbone[j] || down[j]) && !backbone[i]) down[i] = 1;
    }
  }
  ModuleWaves w;
  // Branches: upstream modules joined by edges among themselves (union-find).
  std::vector<int> root(n);
  for (int i = 0; i < n; ++i) root[i] = i;
  auto find = [&](int x) {
    while (root[x] != x) x = root[x] = root[root[x]];
    return x;
  };
  for (int i = 0; i < n; ++i) {
    if (!up[i]) continue;
    for (int j : model.modules[i].inputs) {
      if (up[j]) root[find(i)] = find(j);
    }
  }
  std::vector<int> branch_of(n, -1);
  for (int i = 0; i < n; ++i) {
    if (up[i]) {
      int r = find(i);
      if (branch_of[r] < 0) {
        branch_of[r] = static_cast<int>(w.upstream_branches.size());
        w.upstream_branches.emplace_back();
      }
      w.upstream_branches[branch_of[r]].push_back(model.modules[i].name);
    } else if (down[i]) {
      w.downstream.push_back(model.modules[i].name);
    } else {
      w.backbone.push_back(model.modules[i].name);
    }
  }
  return w;
}

}  // namespace loom
