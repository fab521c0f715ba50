// Sequence parallelism's pieces (runtime/sequence_parallel.h) on a TP group
// of threads, against the whole computation in one: rows gathered and
// reduce-scattered in SliceSpanOf's split (uneven where the group does not
// divide the rows), and column-parallel matmuls from this rank's rows whose
// outputs, input gradient (reduce-scattered) and weight gradients equal
// autograd's on the whole input.
#include "loom/runtime/sequence_parallel.h"

#include <gtest/gtest.h>

#include <vector>

#include "loom/weights/checkpoint_parts.h"
#include "thread_tp_group.h"

namespace loom {
namespace {

TEST(SequenceParallel, RowsGatherAndReduceScatterInTheSplitOfTheirCount) {
  torch::manual_seed(3);
  for (int ranks : {2, 3}) {
    for (int64_t rows : {6, 7, 2}) {  // 7 over 3: 2, 2, 3; 2 over 3: 0, 1, 1
      SCOPED_TRACE(testing::Message() << rows << " rows over " << ranks);
      const torch::Tensor whole = torch::randn({1, rows, 5});
      std::vector<torch::Tensor> partials;  // each rank's addend of a sum
      for (int r = 0; r < ranks; ++r) partials.push_back(torch::randn({1, rows, 5}));
      torch::Tensor sum = torch::zeros({1, rows, 5});
      for (const auto& p : partials) sum += p;
      test::ThreadTpGroup group(ranks);
      std::vector<torch::Tensor> gathered(ranks), scattered(ranks);
      group.Run([&](int r) {
        const runtime::TensorParallel tp = group.Rank(r);
        const torch::Tensor mine = runtime::LocalRows(whole, tp);
        EXPECT_EQ(mine.size(1), weights::SliceSpanOf(rows, r, ranks).length);
        gathered[r] = runtime::GatherRows(mine, rows, tp);
        scattered[r] = runtime::ReduceScatterRows(partials[r], tp);
      });
      for (int r = 0; r < ranks; ++r) {
        EXPECT_TRUE(torch::equal(gathered[r], whole)) << "rank " << r;
        const weights::SliceSpan span = weights::SliceSpanOf(rows, r, ranks);
        EXPECT_TRUE(torch::allclose(scattered[r], sum.narrow(1, span.begin, span.length))) << "rank " << r;
      }
    }
  }
}

TEST(SequenceParallel, GatheredMatmulsEqualTheWholeInputsMatmulsForwardAndBackward) {
  torch::manual_seed(4);
  const int ranks = 3;
  const int64_t rows = 7, in = 6, out = 9;  // each rank: 3 output columns of each weight
  const torch::Tensor x = torch::randn({1, rows, in});
  const torch::Tensor w0 = torch::randn({out, in}), w1 = torch::randn({out, in});
  const torch::Tensor g0 = torch::randn({1, rows, out}), g1 = torch::randn({1, rows, out});
  // The whole computation: y_i = x W_i^T with output gradients g_i.
  const torch::Tensor xw = x.clone().requires_grad_(), a = w0.clone().requires_grad_(), b = w1.clone().requires_grad_();
  torch::autograd::backward({torch::matmul(xw, a.t()), torch::matmul(xw, b.t())}, {g0, g1});
  test::ThreadTpGroup group(ranks);
  std::vector<torch::Tensor> y0(ranks), input_grad(ranks), grad0(ranks), grad1(ranks);
  group.Run([&](int r) {
    const runtime::TensorParallel tp = group.Rank(r);
    const int64_t cols = out / ranks;
    torch::Tensor s0 = w0.slice(0, r * cols, (r + 1) * cols).clone().requires_grad_();
    torch::Tensor s1 = w1.slice(0, r * cols, (r + 1) * cols).clone().requires_grad_();
    const torch::Tensor mine = runtime::LocalRows(x, tp).clone().requires_grad_();
    runtime::WeightGradDeferral deferral;
    const runtime::ComputeCopies copies;  // fp32: the weights themselves
    const auto y = runtime::GatheredMatmuls(mine, rows, {s0, s1}, {&s0, &s1}, &deferral, &tp, &copies);
    ASSERT_EQ(y.size(), 2u);
    torch::autograd::backward(
        {y[0], y[1]}, {g0.slice(2, r * cols, (r + 1) * cols), g1.slice(2, r * cols, (r + 1) * cols)});
    y0[r] = y[0].detach();
    input_grad[r] = mine.grad();
    grad0[r] = s0.grad();
    grad1[r] = s1.grad();
  });
  for (int r = 0; r < ranks; ++r) {
    const int64_t cols = out / ranks;
    EXPECT_TRUE(torch::allclose(y0[r], torch::matmul(x, w0.slice(0, r * cols, (r + 1) * cols).t()))) << r;
    const weights::SliceSpan span = weights::SliceSpanOf(rows, r, ranks);
    EXPECT_TRUE(torch::allclose(input_grad[r], xw.grad().narrow(1, span.begin, span.length), 1e-5, 1e-6)) << r;
    EXPECT_TRUE(torch::allclose(grad0[r], a.grad().slice(0, r * cols, (r + 1) * cols), 1e-5, 1e-6)) << r;
    EXPECT_TRUE(torch::allclose(grad1[r], b.grad().slice(0, r * cols, (r + 1) * cols), 1e-5, 1e-6)) << r;
  }
}

}  // namespace
}  // namespace loom
