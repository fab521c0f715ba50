// A tensor-parallel group of threads in one process, for tests of the
// runtime's TP collectives' users (the vocabulary-parallel loss, sequence
// parallelism): each rank's runtime::TensorParallel exchanges tensors
// through shared slots between barriers, summing, gathering or swapping
// them as c10d would.
#pragma once

#include <torch/torch.h>

#include <barrier>
#include <functional>
#include <thread>
#include <vector>

#include "loom/runtime/torch_model.h"

namespace loom::test {

// `ranks` threads as one TP group: each collective exchanges every rank's
// tensor through shared slots between two barriers.
class ThreadTpGroup {
 public:
  explicit ThreadTpGroup(int ranks) : ranks_(ranks), sync_(ranks), slots_(ranks), all_reduces_(ranks) {}
  runtime::TensorParallel Rank(int r) {
    runtime::TensorParallel tp;
    tp.rank = r;
    tp.size = ranks_;
    tp.sequence_parallel = true;
    tp.all_reduce = [this, r](torch::Tensor& t) {
      ++all_reduces_[r];
      const auto all = Exchange(r, t);
      torch::Tensor sum = torch::zeros_like(t);
      for (const auto& x : all) sum += x;
      t.copy_(sum);
    };
    tp.all_gather = [this, r](const torch::Tensor& mine, torch::Tensor& all) {
      all.copy_(torch::cat(Exchange(r, mine)));
    };
    tp.all_to_all = [this, r](torch::Tensor& in, torch::Tensor& out) {
      const auto all = Exchange(r, in);
      const int64_t chunk = in.numel() / ranks_;
      for (int s = 0; s < ranks_; ++s) out.slice(0, s * chunk, (s + 1) * chunk).copy_(all[s].slice(0, r * chunk, (r + 1) * chunk));
    };
    return tp;
  }
  // Drops rank r's slot (on its thread: a TensorMemoryCounter there sees it freed).
  void Release(int r) { slots_.at(r) = torch::Tensor(); }
  // The all-reduces rank r has made.
  int all_reduces(int r) const { return all_reduces_.at(r); }
  // Runs body(rank) on every rank's thread.
  void Run(const std::function<void(int)>& body) {
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks_; ++r) threads.emplace_back(body, r);
    for (auto& t : threads) t.join();
  }

 private:
  std::vector<torch::Tensor> Exchange(int r, const torch::Tensor& t) {
    slots_[r] = t.clone();
    sync_.arrive_and_wait();
    std::vector<torch::Tensor> all;
    for (const auto& s : slots_) all.push_back(s.clone());
    sync_.arrive_and_wait();  // every rank has read every slot
    return all;
  }
  int ranks_;
  std::barrier<> sync_;
  std::vector<torch::Tensor> slots_;
  std::vector<int> all_reduces_;  // per rank, written by its thread only
};

}  // namespace loom::test
