#include "loom/strategies/pipeweaver/interleave.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "loom/error.h"

namespace loom {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
}

Interleaver::Interleaver(const StageFlow& flow) : flow_(flow) {
  const int G = flow.num_groups(), P = flow.num_ranks;
  fw_.assign(G, std::vector<std::vector<int>>(P));
  bw_.assign(G, std::vector<std::vector<int>>(P));
  succ_.assign(flow.stages.size(), {});
  for (int id = 0; id < static_cast<int>(flow.stages.size()); ++id) {
    const FlowStage& st = flow.stages[id];
    (st.forward ? fw_ : bw_)[flow.group(st.module, st.global_mb)][st.rank].push_back(id);
    for (auto [p, t] : st.preds) succ_[p].push_back({id, t});
  }
  auto by = [&](bool forward) {
    return [&, forward](int a, int b) {
      const FlowStage& x = flow.stages[a];
      const FlowStage& y = flow.stages[b];
      if (x.stage != y.stage) return forward ? x.stage < y.stage : x.stage > y.stage;
      return x.microbatch < y.microbatch;
    };
  };
  for (int g = 0; g < G; ++g) {
    for (int p = 0; p < P; ++p) {
      std::sort(fw_[g][p].begin(), fw_[g][p].end(), by(true));
      std::sort(bw_[g][p].begin(), bw_[g][p].end(), by(false));
    }
  }
  const auto busy = flow.RankBusy_s();
  lower_bound_s_ = busy.empty() ? 0 : *std::max_element(busy.begin(), busy.end());
}

Interleaving Interleaver::Run(const std::vector<int>& position, const InterleaveOptions& options) {
  const StageFlow& f = flow_;
  const int P = f.num_ranks, G = f.num_groups(), N = static_cast<int>(f.stages.size());
  // Groups in ranking order: forward events, then backward events.
  std::vector<int> groups(G), bgroups(G);
  std::iota(groups.begin(), groups.end(), 0);
  std::iota(bgroups.begin(), bgroups.end(), 0);
  std::sort(groups.begin(), groups.end(), [&](int a, int b) { return position[a] < position[b]; });
  std::sort(bgroups.begin(), bgroups.end(), [&](int a, int b) { return position[G + a] < position[G + b]; });
  std::vector<std::vector<int>> qf(P), qb(P);
  for (int p = 0; p < P; ++p) {
    for (int g : groups) qf[p].insert(qf[p].end(), fw_[g][p].begin(), fw_[g][p].end());
    for (int g : bgroups) qb[p].insert(qb[p].end(), bw_[g][p].begin(), bw_[g][p].end());
  }

  Interleaving out;
  out.order.assign(P, {});
  out.start_s.assign(N, 0.0);
  out.end_s.assign(N, 0.0);
  out.peak_bytes.assign(P, 0.0);
  std::vector<int> waiting(N);
  std::vector<double> ready(N, 0.0);
  for (int i = 0; i < N; ++i) waiting[i] = static_cast<int>(f.stages[i].preds.size());
  std::vector<size_t> hf(P, 0), hb(P, 0);
  std::vector<double> free_s(P, 0.0), mem(P, 0.0);
  std::vector<int> last_forward(P, -1);  // -1 none yet, 1 forward, 0 backward
  auto head_ready = [&](const std::vector<int>& q, size_t h) {
    return h < q.size() && waiting[q[h]] == 0 ? ready[q[h]] : kInf;
  };
  for (int done = 0; done < N; ++done) {
    int best_rank = -1, best_id = -1;
    double best_t = kInf;
    int forced_rank = -1;
    double forced_t = kInf;
    for (int p = 0; p < P; ++p) {
      double tf = head_ready(qf[p], hf[p]);
      const double tb = head_ready(qb[p], hb[p]);
      if (tf < kInf && options.track_memory &&
          mem[p] + f.stages[qf[p][hf[p]]].activation_bytes > f.capacity_bytes[p] + 1e-6) {
        if (tf < forced_t) forced_t = tf, forced_rank = p;
        tf = kInf;
      }
      if (tf == kInf && tb == kInf) continue;
      bool take_forward;
      if (options.alternate && tf <= free_s[p] && tb <= free_s[p]) {
        take_forward = last_forward[p] != 1;  // both ready without a bubble: alternate
      } else {
        take_forward = tf < tb;
      }
      const double t = std::max(free_s[p], take_forward ? tf : tb);
      if (t < best_t) best_t = t, best_rank = p, best_id = take_forward ? qf[p][hf[p]] : qb[p][hb[p]];
    }
    if (best_rank < 0) {
      if (forced_rank < 0) throw Error("pipeweaver interleaving: no stage can run (a cyclic dependency)");
      best_rank = forced_rank;
      best_id = qf[forced_rank][hf[forced_rank]];
      best_t = std::max(free_s[forced_rank], forced_t);
      out.fits = false;
    }
    const FlowStage& st = f.stages[best_id];
    const int p = best_rank;
    (st.forward ? hf[p] : hb[p])++;
    out.start_s[best_id] = best_t;
    out.end_s[best_id] = best_t + st.time_s;
    free_s[p] = out.end_s[best_id];
    last_forward[p] = st.forward ? 1 : 0;
    mem[p] += st.forward ? st.activation_bytes : -st.activation_bytes;
    out.peak_bytes[p] = std::max(out.peak_bytes[p], mem[p]);
    out.order[p].push_back(best_id);
    out.makespan_s = std::max(out.makespan_s, out.end_s[best_id]);
    for (auto [s, t] : succ_[best_id]) {
      ready[s] = std::max(ready[s], out.end_s[best_id] + t);
      --waiting[s];
    }
  }
  out.score = out.makespan_s > 0 ? lower_bound_s_ / out.makespan_s : 1.0;
  return out;
}

std::vector<int> DefaultRanking(const StageFlow& flow) {
  std::vector<int> position(flow.num_events());
  int at = 0;
  for (int k = 0; k < flow.num_microbatches; ++k) {
    for (int step = 0; step < 2 * flow.num_modules; ++step) position[flow.event(step, k)] = at++;
  }
  return position;
}

}  // namespace loom
