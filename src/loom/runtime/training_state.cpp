#include "loom/runtime/training_state.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <set>
#include <sstream>
#include <type_traits>

#include "loom/error.h"

namespace loom::runtime {

namespace {

// Flat index of every layer of the model (module by module).
std::vector<int> LayerOffsets(const Model& model) {
  std::vector<int> out{0};
  for (const auto& m : model.modules) out.push_back(out.back() + static_cast<int>(m.layers.size()));
  return out;
}

std::string ShapeText(const torch::Tensor& t) {
  std::string out;
  for (int64_t d : t.sizes()) out += (out.empty() ? "" : "x") + std::to_string(d);
  return "[" + out + "]";
}

std::string LayerName(const Model& model, int module, int layer) {
  return fmt::format("{}_{}", model.modules[module].name, layer);
}

// A layer's parameters, sorted by name (every member sorts the same names alike).
torch::Tensor Pack(const std::vector<std::pair<std::string, const ParamState*>>& params) {
  std::vector<torch::Tensor> parts;
  for (const auto& [name, s] : params) {
    const torch::Tensor v = s->value.detach().reshape({-1}).to(torch::kFloat);
    parts.push_back(v);
    parts.push_back(s->exp_avg.defined() ? s->exp_avg.reshape({-1}).to(torch::kFloat) : torch::zeros_like(v));
    parts.push_back(s->exp_avg_sq.defined() ? s->exp_avg_sq.reshape({-1}).to(torch::kFloat) : torch::zeros_like(v));
    parts.push_back(torch::full({1}, static_cast<float>(s->step)));  // exact below 2^24 steps
  }
  return torch::cat(parts);
}

}  // namespace

std::pair<int, int> LayerOfParam(const Model& model, const std::string& name) {
  const size_t dot = name.find('.');
  const size_t bar = dot == std::string::npos ? std::string::npos : name.rfind('_', dot);
  if (bar != std::string::npos) {
    const int mi = model.FindModule(name.substr(0, bar));
    try {
      const int li = std::stoi(name.substr(bar + 1, dot - bar - 1));
      if (mi >= 0 && li >= 0 && li < static_cast<int>(model.modules[mi].layers.size())) return {mi, li};
    } catch (const std::exception&) {
    }
  }
  throw Error(fmt::format("runtime: parameter '{}' is not named '{{module}}_{{layer}}.…' after a layer of model {}",
                          name, model.name));
}

ParamState CaptureParam(const torch::Tensor& p, const FusedAdamW& optimizer) {
  ParamState s;
  s.value = p.detach().clone();
  if (const AdamWMoments* a = optimizer.StateOf(p)) {
    s.exp_avg = a->exp_avg.clone();
    s.exp_avg_sq = a->exp_avg_sq.clone();
    s.step = a->steps;
  }
  return s;
}

void RestoreParam(const std::string& name, torch::Tensor& p, FusedAdamW& optimizer, const ParamState& s) {
  if (!s.value.defined() || s.value.sizes() != p.sizes()) {
    throw Error(
        fmt::format("runtime: restoring parameter {}: the carried tensor has shape {} where the stage's has "
                    "{}",
                    name, s.value.defined() ? ShapeText(s.value) : "none", ShapeText(p)));
  }
  {
    torch::NoGradGuard no_grad;
    p.copy_(s.value.to(p.device()));
  }
  optimizer.SetState(p, s.step, s.exp_avg, s.exp_avg_sq);
}

int64_t ExchangeState(GroupBase& world, const Model& model, TrainingState& state,
                      const std::map<std::string, torch::Tensor>& needed, AbortFlag abort) {
  const std::vector<int> offset = LayerOffsets(model);
  const int L = offset.back(), W = world.getSize(), me = world.getRank();
  // Per layer: the names this member needs, and whether it holds them all.
  std::vector<std::vector<std::string>> need_names(L);
  for (const auto& [name, t] : needed) {
    const auto [mi, li] = LayerOfParam(model, name);
    need_names[offset[mi] + li].push_back(name);
  }
  std::vector<std::vector<std::pair<std::string, const ParamState*>>> held(L);
  for (const auto& [name, s] : state) {
    const auto [mi, li] = LayerOfParam(model, name);
    held[offset[mi] + li].push_back({name, &s});
  }
  torch::Tensor flags = torch::zeros({2 * L}, torch::kLong);  // [have..., need...]
  for (int l = 0; l < L; ++l) {
    if (!held[l].empty()) flags[l] = 1;
    bool missing = false;
    for (const auto& n : need_names[l]) missing = missing || !state.count(n);
    if (missing) flags[L + l] = 1;
  }
  const std::vector<torch::Tensor> all = AllGather(world, flags, abort);
  int64_t received = 0;
  for (int l = 0; l < L; ++l) {
    int src = -1;
    bool wanted = false;
    for (int r = 0; r < W; ++r) {
      if (src < 0 && all[r][l].item<int64_t>() != 0) src = r;
      wanted = wanted || all[r][L + l].item<int64_t>() != 0;
    }
    if (!wanted) continue;
    if (src < 0) {
      int mi = 0;
      while (offset[mi + 1] <= l) ++mi;
      throw Error(fmt::format("runtime: layer {} of module {} was lost: no surviving process holds it", l - offset[mi],
                              model.modules[mi].name));
    }
    torch::Tensor size = torch::zeros({1}, torch::kLong);
    torch::Tensor flat;
    if (me == src) {
      flat = Pack(held[l]);
      size[0] = flat.numel();
    }
    Broadcast(world, size, src, abort);
    if (me != src) flat = torch::empty({size[0].item<int64_t>()}, torch::kFloat);
    Broadcast(world, flat, src, abort);
    if (all[me][L + l].item<int64_t>() == 0) continue;
    std::vector<std::string> names = need_names[l];
    std::sort(names.begin(), names.end());
    int64_t off = 0;
    for (const auto& name : names) {
      const torch::Tensor& like = needed.at(name);
      const int64_t n = like.numel();
      if (off + 3 * n + 1 > flat.numel()) {
        throw Error(
            fmt::format("runtime: the state of {} sent for layer {} is shorter than this stage's parameters", name, l));
      }
      ParamState s;
      s.value = flat.slice(0, off, off + n).view(like.sizes()).clone();
      s.step = static_cast<int64_t>(flat[off + 3 * n].item<float>());
      if (s.step > 0) {
        s.exp_avg = flat.slice(0, off + n, off + 2 * n).view(like.sizes()).clone();
        s.exp_avg_sq = flat.slice(0, off + 2 * n, off + 3 * n).view(like.sizes()).clone();
      }
      off += 3 * n + 1;
      state[name] = std::move(s);
    }
    received += flat.numel() * static_cast<int64_t>(sizeof(float));
  }
  return received;
}

}  // namespace loom::runtime
