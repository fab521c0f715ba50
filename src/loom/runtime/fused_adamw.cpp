#include "loom/runtime/fused_adamw.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <string>
#include <tuple>

#include "loom/error.h"

namespace loom::runtime {

namespace {

// The tensor lists of one _fused_adamw_ call: every tensor on one device, of one dtype.
struct FusedLists {
  std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs, step_counts;
};

}  // namespace

FusedAdamW::FusedAdamW(std::vector<Group> groups) : groups_(std::move(groups)) {}

void FusedAdamW::Step(double lr) {
  torch::NoGradGuard no_grad;
  // The fused kernels read each tensor as one contiguous run of elements:
  // every parameter is checked before any state moves.
  for (const Group& group : groups_) {
    for (const auto& p : group.params) {
      if (p.grad().defined() && !p.is_contiguous()) {
        throw Error(
            fmt::format("runtime: AdamW: a parameter of shape {} is not contiguous", fmt::join(p.sizes(), "x")));
      }
    }
  }
  for (const Group& group : groups_) {
    std::map<std::tuple<int, int, int>, FusedLists> lists;  // (device type, index, dtype)
    std::vector<AdamWMoments*> stepped;
    for (const auto& p : group.params) {
      if (!p.grad().defined()) continue;
      torch::Tensor grad = p.grad();
      if (!grad.is_contiguous()) grad = p.mutable_grad() = grad.contiguous();
      AdamWMoments& s = state_[p.unsafeGetTensorImpl()];
      if (!s.exp_avg.defined()) {  // torch.optim.AdamW's lazy state: zeros, count 0
        s.exp_avg = torch::zeros_like(p, torch::MemoryFormat::Contiguous);
        s.exp_avg_sq = torch::zeros_like(p, torch::MemoryFormat::Contiguous);
        s.step_count = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat).device(p.device()));
        s.steps = 0;
      }
      FusedLists& l =
          lists[{static_cast<int>(p.device().type()), p.device().index(), static_cast<int>(p.scalar_type())}];
      l.params.push_back(p);
      l.grads.push_back(grad);
      l.exp_avgs.push_back(s.exp_avg);
      l.exp_avg_sqs.push_back(s.exp_avg_sq);
      l.step_counts.push_back(s.step_count);
      stepped.push_back(&s);
    }
    for (auto& [key, l] : lists) {
      // The kernel reads the counts already advanced (torch.optim.adam._fused_adam).
      at::_foreach_add_(l.step_counts, 1);
      at::_fused_adamw_(l.params, l.grads, l.exp_avgs, l.exp_avg_sqs, /*max_exp_avg_sqs=*/{}, l.step_counts, lr, kBeta1,
                        kBeta2, group.weight_decay, kEps, /*amsgrad=*/false, /*maximize=*/false);
    }
    for (AdamWMoments* s : stepped) ++s->steps;  // the host's copy of the counts, once the kernels ran
  }
}

void FusedAdamW::ZeroGrad() {
  for (const Group& group : groups_) {
    for (auto p : group.params) p.mutable_grad().reset();
  }
}

const AdamWMoments* FusedAdamW::StateOf(const torch::Tensor& p) const {
  const auto it = state_.find(p.unsafeGetTensorImpl());
  return it == state_.end() ? nullptr : &it->second;
}

void FusedAdamW::SetState(const torch::Tensor& p, int64_t steps, const torch::Tensor& exp_avg,
                          const torch::Tensor& exp_avg_sq) {
  state_.erase(p.unsafeGetTensorImpl());
  if (steps <= 0) return;
  AdamWMoments s;
  const auto on_p = torch::TensorOptions().dtype(p.scalar_type()).device(p.device());
  s.exp_avg = exp_avg.to(on_p).reshape(p.sizes()).clone(torch::MemoryFormat::Contiguous);
  s.exp_avg_sq = exp_avg_sq.to(on_p).reshape(p.sizes()).clone(torch::MemoryFormat::Contiguous);
  // The fp32 count is exact below 2^24 steps (torch.optim keeps it so too).
  s.step_count =
      torch::full({}, static_cast<double>(steps), torch::TensorOptions().dtype(torch::kFloat).device(p.device()));
  s.steps = steps;
  state_[p.unsafeGetTensorImpl()] = std::move(s);
}

}  // namespace loom::runtime
