#include "loom/strategies/mmscale/allocation.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>

#include "loom/error.h"

namespace loom {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

int BackboneIndex(const AllocationProblem& p) {
  for (size_t u = 0; u < p.units.size(); ++u) {
    if (p.units[u].backbone) return static_cast<int>(u);
  }
  throw Error("resource allocation: no unit is marked as the backbone");
}

std::vector<int> DpChoices(const AllocationProblem& p) {
  if (!p.dp_choices.empty()) return p.dp_choices;
  std::vector<int> d;
  for (int64_t i = 1; i <= p.global_batch; ++i) {
    if (p.global_batch % i == 0) d.push_back(static_cast<int>(i));
  }
  return d;
}

// Samples per microbatch of unit u: DP_lm / DP_u (the backbone's is 1).
double SamplesPerMicrobatch(int dp_lm, int dp_u) { return static_cast<double>(dp_lm) / dp_u; }

// Smallest PP of a unit whose first stage fits in memory with `depth_after`
// pipeline stages after the unit: that stage keeps the activations of
// PP + depth_after microbatches in flight under 1F1B, each 1/PP of the unit's
// (paper §4.2: "the first PP stage requires storage for PP_lm microbatches";
// in a chain of units the first stage of an upstream unit holds more).
// Returns max_pp + 1 when none does.
int MinPp(double state_bytes, double act_bytes, int depth_after, double mem_bytes, int max_pp) {
  const double room = mem_bytes - act_bytes;
  if (room <= 0) return max_pp + 1;
  const double k = std::ceil((state_bytes + act_bytes * depth_after) / room - 1e-12);
  return static_cast<int>(std::clamp(k, 1.0, static_cast<double>(max_pp + 1)));
}

// One candidate TP x DP for one unit, given the backbone's DP.
struct Option {
  int option = 0, tp = 1, dp = 1;
  double w = 0;            // warm-up contribution (DP_lm / DP_u) x C_u
  double a = 0;            // stage-time numerator DP_lm x TP_u x C_u
  int cost = 1;            // GPUs per unit of PP: TP x DP
  int kmin = 1, kmax = 1;  // kmin: memory with no stage after the unit
  double state = 0;        // weights + gradients + optimizer share, before dividing by PP
  double act = 0;          // activations of one microbatch of the unit
};

// Keeps the `keep` best allocations with distinct choices, best first.
class TopK {
 public:
  explicit TopK(int keep) : keep_(std::max(1, keep)) {}
  double threshold() const { return static_cast<int>(best_.size()) < keep_ ? kInf : best_.back().iteration_s(); }
  void Offer(Allocation a) {
    if (a.iteration_s() >= threshold()) return;
    for (const auto& b : best_) {
      if (b.units == a.units) return;
    }
    auto pos = std::upper_bound(best_.begin(), best_.end(), a, [](const Allocation& x, const Allocation& y) {
      return x.iteration_s() < y.iteration_s();
    });
    best_.insert(pos, std::move(a));
    if (static_cast<int>(best_.size()) > keep_) best_.pop_back();
  }
  std::vector<Allocation> Take() { return std::move(best_); }

 private:
  int keep_;
  std::vector<Allocation> best_;
};

// Decides the PP of every unit for fixed TP x DP and lower bounds kmin;
// returns false when nothing fits.
using SplitRule =
    std::function<bool(const std::vector<const Option*>&, const std::vector<int>& kmin, std::vector<int>& k)>;

// Alg. 1's loop over TP x DP per unit, with branch-and-bound: a candidate
// whose T_warm plus the unconstrained steady bound (m - 1) x sum(a) / N cannot
// beat the keep-th best is skipped (both terms only grow from there).
std::vector<Allocation> Enumerate(const AllocationProblem& p, int keep, const SplitRule& split) {
  const int U = static_cast<int>(p.units.size());
  if (U == 0) throw Error("resource allocation: no units");
  if (p.num_gpus < 1 || p.global_batch < 1 || p.gpu_mem_bytes <= 0) {
    throw Error("resource allocation: GPUs, global batch and GPU memory must be positive");
  }
  const int lm = BackboneIndex(p);
  const std::vector<int> dps = DpChoices(p);
  const int N = p.num_gpus;
  TopK top(keep);
  std::vector<std::vector<Option>> opts(U);
  std::vector<double> min_w(U), min_a(U);
  for (size_t bo = 0; bo < p.units[lm].options.size(); ++bo) {
    const UnitModel& bm = p.units[lm].options[bo];
    if (bm.tp > p.node_gpus) continue;
    for (int dp_lm : dps) {
      if (p.global_batch % dp_lm != 0 || static_cast<int64_t>(bm.tp) * dp_lm > N) continue;
      const int m = static_cast<int>(p.global_batch / dp_lm);
      // Candidate options of every unit for this backbone DP, by warm-up contribution.
      bool empty = false;
      for (int u = 0; u < U; ++u) {
        opts[u].clear();
        for (size_t o = 0; o < p.units[u].options.size(); ++o) {
          const UnitModel& um = p.units[u].options[o];
          if (u == lm && o != bo) continue;
          if (um.tp > p.node_gpus) continue;
          for (int dp : dps) {
            if (u == lm && dp != dp_lm) continue;
            if (static_cast<int64_t>(um.tp) * dp > N) continue;
            Option op;
            op.option = static_cast<int>(o);
            op.tp = um.tp;
            op.dp = dp;
            op.w = SamplesPerMicrobatch(dp_lm, dp) * um.time_s;
            op.a = static_cast<double>(dp_lm) * um.tp * um.time_s;
            op.cost = um.tp * dp;
            op.state = um.weight_bytes + um.optimizer_bytes / dp;
            op.act = um.activation_bytes * SamplesPerMicrobatch(dp_lm, dp);
            op.kmax = p.units[u].max_pp;
            op.kmin = MinPp(op.state, op.act, 0, p.gpu_mem_bytes, op.kmax);
            if (op.kmin > op.kmax || static_cast<int64_t>(op.cost) * op.kmin > N) continue;
            opts[u].push_back(op);
          }
        }
        std::stable_sort(opts[u].begin(), opts[u].end(), [](const Option& x, const Option& y) { return x.w < y.w; });
        if (opts[u].empty()) {
          empty = true;
          break;
        }
        min_w[u] = opts[u][0].w;
        min_a[u] = kInf;
        for (const auto& op : opts[u]) min_a[u] = std::min(min_a[u], op.a);
      }
      if (empty) continue;
      std::vector<const Option*> pick(U, nullptr);
      std::vector<int> k(U);
      std::function<void(int, double, double)> visit = [&](int u, double w_sum, double a_sum) {
        if (u == U) {
          int largest_tp = 1;
          for (int v = 0; v < U; ++v) largest_tp = std::max(largest_tp, pick[v]->tp);
          if (p.align_to_largest_tp) {
            for (int v = 0; v < U; ++v) {
              if (pick[v]->cost % largest_tp != 0 || pick[v]->cost / largest_tp > dp_lm) return;
            }
          }
          // Memory of the chain: a unit's first stage holds the warm-up of
          // every stage after it, so raise PP lower bounds until it fits.
          std::vector<int> kmin(U);
          for (int v = 0; v < U; ++v) kmin[v] = pick[v]->kmin;
          for (bool fits = false; !fits;) {
            if (!split(pick, kmin, k)) return;
            fits = true;
            int after = 0;
            for (int v = U - 1; v >= 0; --v) {
              const int need = MinPp(pick[v]->state, pick[v]->act, after, p.gpu_mem_bytes, pick[v]->kmax);
              if (k[v] < need) {
                if (need > pick[v]->kmax) return;
                kmin[v] = need;
                fits = false;
              }
              after += k[v];
            }
          }
          Allocation a;
          double level = 0;
          for (int v = 0; v < U; ++v) {
            a.units.push_back({pick[v]->option, pick[v]->tp, pick[v]->dp, k[v]});
            level = std::max(level, pick[v]->a / (static_cast<double>(pick[v]->cost) * k[v]));
          }
          a.warmup_s = w_sum / p.vpp;
          a.steady_s = (m - 1) * level;
          std::vector<double> av(U), lo(U);
          for (int v = 0; v < U; ++v) {
            av[v] = pick[v]->a;
            lo[v] = static_cast<double>(pick[v]->cost) * kmin[v];
          }
          a.continuous_iteration_s = a.warmup_s + (m - 1) * ContinuousSplit(av, lo, N);
          top.Offer(std::move(a));
          return;
        }
        double rest_w = 0, rest_a = 0;
        for (int v = u + 1; v < U; ++v) {
          rest_w += min_w[v];
          rest_a += min_a[v];
        }
        for (const Option& op : opts[u]) {
          const double bound = (w_sum + op.w + rest_w) / p.vpp + (m - 1) * (a_sum + min_a[u] + rest_a) / N;
          if (bound >= top.threshold()) break;  // options are sorted by w: the rest are no better
          pick[u] = &op;
          visit(u + 1, w_sum + op.w, a_sum + op.a);
        }
      };
      visit(0, 0.0, 0.0);
    }
  }
  return top.Take();
}

}  // namespace

double StageTime_s(const AllocationProblem& p, const std::vector<UnitChoice>& c, int u) {
  const int lm = BackboneIndex(p);
  const UnitModel& m = p.units[u].options[c[u].option];
  return SamplesPerMicrobatch(c[lm].dp, c[u].dp) * m.time_s / c[u].pp;
}

double WarmupTime_s(const AllocationProblem& p, const std::vector<UnitChoice>& c) {
  double t = 0;
  for (size_t u = 0; u < c.size(); ++u) t += c[u].pp * StageTime_s(p, c, static_cast<int>(u));
  return t / p.vpp;
}

double SteadyTime_s(const AllocationProblem& p, const std::vector<UnitChoice>& c) {
  const int lm = BackboneIndex(p);
  double level = 0;
  for (size_t u = 0; u < c.size(); ++u) level = std::max(level, StageTime_s(p, c, static_cast<int>(u)));
  return level * (static_cast<double>(p.global_batch) / c[lm].dp - 1);
}

bool FitsMemory(const AllocationProblem& p, const std::vector<UnitChoice>& c) {
  const int lm = BackboneIndex(p);
  int after = 0;
  for (int u = static_cast<int>(c.size()) - 1; u >= 0; --u) {
    const UnitModel& m = p.units[u].options[c[u].option];
    const double act = m.activation_bytes * SamplesPerMicrobatch(c[lm].dp, c[u].dp);
    const double bytes = (m.weight_bytes + m.optimizer_bytes / c[u].dp + act * (c[u].pp + after)) / c[u].pp;
    if (bytes > p.gpu_mem_bytes * (1 + 1e-12)) return false;
    after += c[u].pp;
  }
  return true;
}

double ContinuousSplit(const std::vector<double>& a, const std::vector<double>& lower, double budget,
                       std::vector<double>* x) {
  const size_t U = a.size();
  double floor_sum = 0;
  for (double l : lower) floor_sum += l;
  if (floor_sum > budget * (1 + 1e-12)) return kInf;
  // Units pinned at their lower bound: those with a_u / lower_u <= tau. Pinning
  // one leaves less for the others and raises tau, so grow the set to a fixed point.
  std::vector<bool> pinned(U, false);
  double tau = 0;
  for (;;) {
    double free_a = 0, pinned_x = 0;
    for (size_t u = 0; u < U; ++u) (pinned[u] ? pinned_x : free_a) += pinned[u] ? lower[u] : a[u];
    if (free_a <= 0) {
      tau = 0;
      for (size_t u = 0; u < U; ++u) tau = std::max(tau, lower[u] > 0 ? a[u] / lower[u] : 0.0);
      break;
    }
    if (budget - pinned_x <= 0) return kInf;
    tau = free_a / (budget - pinned_x);
    bool changed = false;
    for (size_t u = 0; u < U; ++u) {
      if (!pinned[u] && a[u] / tau < lower[u]) {
        pinned[u] = true;
        changed = true;
      }
    }
    if (!changed) break;
  }
  if (x != nullptr) {
    x->assign(U, 0.0);
    for (size_t u = 0; u < U; ++u) (*x)[u] = std::max(lower[u], tau > 0 ? a[u] / tau : lower[u]);
  }
  return tau;
}

bool IntegerSplit(const std::vector<double>& a, const std::vector<int>& cost, const std::vector<int>& kmin,
                  const std::vector<int>& kmax, int budget, std::vector<int>& k) {
  const size_t U = a.size();
  std::vector<double> lower(U);
  for (size_t u = 0; u < U; ++u) lower[u] = static_cast<double>(cost[u]) * kmin[u];
  const double tau = ContinuousSplit(a, lower, budget);
  if (!std::isfinite(tau)) return false;
  // k_u(tau) = max(kmin_u, ceil(a_u / (cost_u tau))) is non-increasing in tau
  // and the integer optimum is >= the continuous one: start there and raise the
  // level breakpoint by breakpoint until the GPUs suffice. The first level that
  // fits is optimal.
  k.assign(U, 0);
  for (size_t u = 0; u < U; ++u) {
    const double need = tau > 0 ? a[u] / (cost[u] * tau) : 0.0;
    k[u] = std::max(kmin[u], static_cast<int>(std::ceil(need - 1e-9)));
  }
  for (;;) {
    int64_t used = 0;
    bool within = true;
    for (size_t u = 0; u < U; ++u) {
      used += static_cast<int64_t>(cost[u]) * k[u];
      within = within && k[u] <= kmax[u];
    }
    if (within && used <= budget) return true;
    // Next breakpoint: the unit whose decrement costs the least level.
    int next = -1;
    double next_level = kInf;
    for (size_t u = 0; u < U; ++u) {
      if (k[u] <= kmin[u]) continue;
      const double level = a[u] / (static_cast<double>(cost[u]) * (k[u] - 1));
      if (level < next_level) {
        next_level = level;
        next = static_cast<int>(u);
      }
    }
    if (next < 0) return false;
    --k[next];
  }
}

std::vector<Allocation> AllocateResources(const AllocationProblem& p, int keep) {
  const int N = p.num_gpus;
  return Enumerate(p, keep,
                   [N](const std::vector<const Option*>& pick, const std::vector<int>& kmin, std::vector<int>& k) {
                     const size_t U = pick.size();
                     std::vector<double> a(U);
                     std::vector<int> cost(U), kmax(U);
                     for (size_t u = 0; u < U; ++u) {
                       a[u] = pick[u]->a;
                       cost[u] = pick[u]->cost;
                       kmax[u] = pick[u]->kmax;
                     }
                     return IntegerSplit(a, cost, kmin, kmax, N, k);
                   });
}

std::vector<Allocation> RatioAllocation(const AllocationProblem& p, const std::vector<double>& flops_per_sample,
                                        int keep) {
  if (flops_per_sample.size() != p.units.size()) throw Error("ratio allocation: one FLOP count per unit");
  const double total = std::accumulate(flops_per_sample.begin(), flops_per_sample.end(), 0.0);
  if (total <= 0) throw Error("ratio allocation: the units have no FLOPs");
  const int N = p.num_gpus;
  return Enumerate(p, keep,
                   [&](const std::vector<const Option*>& pick, const std::vector<int>& kmin, std::vector<int>& k) {
                     k.assign(pick.size(), 0);
                     int64_t used = 0;
                     for (size_t u = 0; u < pick.size(); ++u) {
                       const double share = N * flops_per_sample[u] / total;
                       k[u] = std::min(pick[u]->kmax, std::max(kmin[u], static_cast<int>(share / pick[u]->cost)));
                       used += static_cast<int64_t>(pick[u]->cost) * k[u];
                     }
                     return used <= N;
                   });
}

Allocation BruteForceAllocation(const AllocationProblem& p) {
  const int U = static_cast<int>(p.units.size());
  const int lm = BackboneIndex(p);
  const std::vector<int> dps = DpChoices(p);
  Allocation best;
  double best_t = kInf;
  std::vector<UnitChoice> c(U);
  std::function<void(int, int)> visit = [&](int u, int used) {
    if (u == U) {
      if (p.global_batch % c[lm].dp != 0) return;
      int largest_tp = 1;
      for (const auto& x : c) largest_tp = std::max(largest_tp, x.tp);
      if (p.align_to_largest_tp) {
        for (const auto& x : c) {
          if ((x.tp * x.dp) % largest_tp != 0 || x.tp * x.dp / largest_tp > c[lm].dp) return;
        }
      }
      if (!FitsMemory(p, c)) return;
      const double t = WarmupTime_s(p, c) + SteadyTime_s(p, c);
      if (t < best_t - 1e-12) {
        best_t = t;
        best.units = c;
        best.warmup_s = WarmupTime_s(p, c);
        best.steady_s = SteadyTime_s(p, c);
      }
      return;
    }
    for (size_t o = 0; o < p.units[u].options.size(); ++o) {
      const int tp = p.units[u].options[o].tp;
      if (tp > p.node_gpus) continue;
      for (int dp : dps) {
        for (int pp = 1; pp <= p.units[u].max_pp && used + tp * dp * pp <= p.num_gpus; ++pp) {
          c[u] = {static_cast<int>(o), tp, dp, pp};
          visit(u + 1, used + tp * dp * pp);
        }
      }
    }
  };
  visit(0, 0);
  return best;
}

}  // namespace loom
